package e2ebench

import (
	"fmt"
	"os"
	"time"

	"github.com/prometheus/procfs"
)

// ProcSample is what the kernel has accounted to a process so far.
type ProcSample struct {
	At          time.Time
	CPU         time.Duration // user plus system, all threads
	RSS         int64         // resident now
	PeakRSS     int64         // VmHWM: since start or the last ResetPeakRSS
	CtxSwitches uint64        // voluntary plus involuntary, summed over threads
	WriteBytes  uint64        // bytes sent (or due) to storage: /proc/PID/io write_bytes
	OpenFiles   int           // open file descriptors
}

// SampleProc reads pid's figures from /proc. Threads that exit between
// listing and reading are skipped; the write counter needs the right to
// ptrace the process (its owner or root).
func SampleProc(pid int) (ProcSample, error) {
	pr, err := procfs.NewProc(pid)
	if err != nil {
		return ProcSample{}, fmt.Errorf("e2ebench: /proc/%d: %w", pid, err)
	}
	s := ProcSample{At: time.Now()}
	st, err := pr.Stat()
	if err != nil {
		return ProcSample{}, fmt.Errorf("e2ebench: /proc/%d/stat: %w", pid, err)
	}
	s.CPU = time.Duration(st.CPUTime() * float64(time.Second))
	s.RSS = int64(st.ResidentMemory())
	status, err := pr.NewStatus()
	if err != nil {
		return ProcSample{}, fmt.Errorf("e2ebench: /proc/%d/status: %w", pid, err)
	}
	s.PeakRSS = int64(status.VmHWM)
	io, err := pr.IO()
	if err != nil {
		return ProcSample{}, fmt.Errorf("e2ebench: /proc/%d/io: %w", pid, err)
	}
	s.WriteBytes = io.WriteBytes
	if s.OpenFiles, err = pr.FileDescriptorsLen(); err != nil {
		return ProcSample{}, fmt.Errorf("e2ebench: /proc/%d/fd: %w", pid, err)
	}
	threads, err := procfs.AllThreads(pid)
	if err != nil {
		return ProcSample{}, fmt.Errorf("e2ebench: /proc/%d/task: %w", pid, err)
	}
	for _, t := range threads {
		ts, err := t.NewStatus()
		if err != nil {
			continue // the thread ended
		}
		s.CtxSwitches += ts.VoluntaryCtxtSwitches + ts.NonVoluntaryCtxtSwitches
	}
	return s, nil
}

// ResetPeakRSS sets pid's peak RSS (VmHWM) back to its current RSS, so the
// next sample's PeakRSS covers only what follows.
func ResetPeakRSS(pid int) error {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		return fmt.Errorf("e2ebench: reset peak RSS of %d: %w", pid, err)
	}
	return nil
}
