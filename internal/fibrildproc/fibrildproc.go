// Package fibrildproc builds and runs real fibrild processes: the one
// harness shared by the end-to-end tests, the acceptance suite and
// `fibril bench` when it starts its own broker.
//
// Start runs the binary on loopback with a fresh or given data directory,
// reads its log from stderr, and returns once the daemon has logged
// msg=listening for its client protocol (and its admin API, which Start
// always enables on an ephemeral loopback port). Kill sends SIGKILL, Stop
// SIGTERM; both wait for the process to be reaped.
package fibrildproc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/procfs"

	"github.com/fibril-edge/fibril/internal/loopback"
)

// DefaultStartTimeout is how long Start waits for the listening lines.
const DefaultStartTimeout = 60 * time.Second

// ErrExited is returned by Start when the process ended before listening.
var ErrExited = errors.New("fibrild exited before listening")

// Build compiles the fibrild main package in pkgDir (for example
// "../fibrild" from tools/fibril) into out, with -ldflags when given.
func Build(ctx context.Context, pkgDir, out string, ldflags string) error {
	return BuildWith(ctx, pkgDir, out, BuildOptions{LDFlags: ldflags})
}

// BuildOptions configure BuildWith. The zero value is a plain go build.
type BuildOptions struct {
	// LDFlags are passed as -ldflags when not empty.
	LDFlags string
	// Tags are passed as -tags when not empty (for example "faultinject",
	// the acceptance suite's storage fault hook).
	Tags []string
}

// BuildWith compiles the fibrild main package in pkgDir into out with o.
func BuildWith(ctx context.Context, pkgDir, out string, o BuildOptions) error {
	args := []string{"build", "-o", out}
	if o.LDFlags != "" {
		args = append(args, "-ldflags", o.LDFlags)
	}
	if len(o.Tags) > 0 {
		args = append(args, "-tags", strings.Join(o.Tags, ","))
	}
	cmd := exec.CommandContext(ctx, "go", append(args, ".")...)
	cmd.Dir = pkgDir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkgDir, err, b)
	}
	return nil
}

// Options configure Start.
type Options struct {
	// Bin is the fibrild binary. Required.
	Bin string
	// DataDir is the storage directory. Required: pass a temp dir for a
	// fresh broker, the same one again for a restart.
	DataDir string
	// Config is a fibril.toml path. Empty: an empty file in DataDir's
	// parent is written and used, so the machine's /etc/fibril stays out.
	Config string
	// Args are extra command-line flags (for example "--storage.min_free", "0").
	Args []string
	// Env is added to the process environment.
	Env []string
	// Listen is the client protocol address; default a free loopback
	// port outside the kernel's ephemeral range (internal/loopback), so
	// that a restart on the Process's Addr finds it free: no outgoing
	// connection made while the daemon was down can have taken it.
	Listen string
	// StartTimeout bounds the wait for the listening lines; default
	// DefaultStartTimeout.
	StartTimeout time.Duration
	// Log, when set, also receives every line the daemon writes to stderr.
	Log io.Writer
}

// Process is a running (or exited) fibrild.
type Process struct {
	// Addr is the client protocol address, host:port.
	Addr string
	// Admin is the admin API base URL, http://host:port.
	Admin string

	cmd    *exec.Cmd
	mu     sync.Mutex
	log    bytes.Buffer
	exited chan struct{}
	err    error // Wait's result, set before exited closes
}

var listenLine = regexp.MustCompile(`msg="?listening"? proto=(\w+) addr=(\S+)`)

// Start runs fibrild and waits until it listens on its client protocol
// and its admin API. On any error the process is killed and reaped.
func Start(ctx context.Context, o Options) (*Process, error) {
	if o.Bin == "" || o.DataDir == "" {
		return nil, errors.New("fibrildproc: Bin and DataDir are required")
	}
	if o.Config == "" {
		o.Config = filepath.Join(filepath.Dir(filepath.Clean(o.DataDir)), filepath.Base(o.DataDir)+".empty.toml")
		if err := os.WriteFile(o.Config, nil, 0o644); err != nil {
			return nil, fmt.Errorf("fibrildproc: empty config: %w", err)
		}
	}
	if o.Listen == "" {
		ports, err := loopback.Ports(1)
		if err != nil {
			return nil, fmt.Errorf("fibrildproc: %w", err)
		}
		o.Listen = ports[0]
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	args := []string{"--config", o.Config, "--storage.data_dir", o.DataDir,
		"--server.listen", o.Listen, "--admin.listen", "127.0.0.1:0"}
	p := &Process{cmd: exec.Command(o.Bin, append(args, o.Args...)...), exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), o.Env...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("fibrildproc: start %s: %w", o.Bin, err)
	}
	addrs := make(chan [2]string, 4)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			p.mu.Unlock()
			if o.Log != nil {
				fmt.Fprintln(o.Log, line)
			}
			if m := listenLine.FindStringSubmatch(line); m != nil {
				select {
				case addrs <- [2]string{m[1], m[2]}:
				default:
				}
			}
		}
		io.Copy(io.Discard, stderr)
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	timeout := time.NewTimer(o.StartTimeout)
	defer timeout.Stop()
	for p.Addr == "" || p.Admin == "" {
		select {
		case a := <-addrs:
			switch a[0] {
			case "fibril":
				p.Addr = a[1]
			case "admin":
				p.Admin = "http://" + a[1]
			}
		case <-p.exited:
			return nil, fmt.Errorf("%w: %v\n%s", ErrExited, p.err, p.Log())
		case <-timeout.C:
			p.Kill()
			return nil, fmt.Errorf("fibrildproc: not listening within %v\n%s", o.StartTimeout, p.Log())
		case <-ctx.Done():
			p.Kill()
			return nil, ctx.Err()
		}
	}
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Log is everything the daemon has written to stderr so far.
func (p *Process) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// Exited is closed once the process has been reaped.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// ExitErr is the process's exit status once Exited is closed (nil for a
// clean exit).
func (p *Process) ExitErr() error {
	<-p.exited
	return p.err
}

// Kill sends SIGKILL and waits until the process is reaped. Killing an
// exited process is not an error.
func (p *Process) Kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// Dump sends SIGQUIT, which makes a Go program print every goroutine's
// stack and exit, waits up to timeout for the exit (past it the process
// is killed), and returns the log with the dump. For a test's failure
// report: where each goroutine of a wedged daemon waits.
func (p *Process) Dump(timeout time.Duration) string {
	select {
	case <-p.exited:
		return p.Log()
	default:
	}
	p.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.Kill()
	}
	return p.Log()
}

// Stop sends SIGTERM and waits up to timeout for the exit; past it the
// process is made to dump its goroutines (then killed) and an error
// returned, the dump in it. It returns the exit status.
func (p *Process) Stop(timeout time.Duration) error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("fibrildproc: SIGTERM: %w", err)
	}
	select {
	case <-p.exited:
		return p.err
	case <-time.After(timeout):
		// A goroutine dump (SIGQUIT) shows where the shutdown hangs.
		return fmt.Errorf("fibrildproc: no exit within %v of SIGTERM\n%s", timeout, p.Dump(10*time.Second))
	}
}

// Usage is what the kernel accounts to the process: CPU time (user plus
// system), resident set size now and at its peak, and context switches
// (each one a wake-up after a sleep or a preemption).
type Usage struct {
	CPU         time.Duration
	RSS         int64
	PeakRSS     int64
	CtxSwitches uint64
}

// Usage reads the process's figures from /proc while it runs.
func (p *Process) Usage() (Usage, error) { return ProcUsage(p.Pid()) }

// ProcUsage reads Usage for any process id from /proc.
func ProcUsage(pid int) (Usage, error) {
	pr, err := procfs.NewProc(pid)
	if err != nil {
		return Usage{}, fmt.Errorf("fibrildproc: /proc/%d: %w", pid, err)
	}
	st, err := pr.Stat()
	if err != nil {
		return Usage{}, fmt.Errorf("fibrildproc: /proc/%d/stat: %w", pid, err)
	}
	status, err := pr.NewStatus()
	if err != nil {
		return Usage{}, fmt.Errorf("fibrildproc: /proc/%d/status: %w", pid, err)
	}
	return Usage{
		CPU:         time.Duration(st.CPUTime() * float64(time.Second)),
		RSS:         int64(st.ResidentMemory()),
		PeakRSS:     int64(status.VmHWM),
		CtxSwitches: status.VoluntaryCtxtSwitches + status.NonVoluntaryCtxtSwitches,
	}, nil
}
