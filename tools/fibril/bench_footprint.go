package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"

	"github.com/fibril-edge/fibril/tools/fibril/internal/benchutil"
	"github.com/fibril-edge/fibril/tools/fibril/internal/e2ebench"
)

// runFootprint prints one footprint line per broker process: fibrild
// (when started here) and each NATS server.
func runFootprint(ctx context.Context, o *benchOptions, sys *benchSystems, base string, env e2ebench.Env, res *e2ebench.Results, stdout, stderr io.Writer) error {
	for _, s := range sys.list {
		if s.pid() == 0 || s.name == "fibril-buffered" && sys.hasSystem("fibril-durable") {
			continue // one line per process (not a cluster's); fibril's two modes share one
		}
		fp := e2ebench.Footprint{Kind: "footprint", Env: env, BinaryBytes: -1, StartupSeconds: -1}
		switch t := s.target.(type) {
		case e2ebench.Fibril:
			fp.System, fp.Process = "fibril", "fibrild"
			if sys.fibrildBin != "" {
				if info, err := os.Stat(sys.fibrildBin); err == nil {
					fp.BinaryBytes = info.Size()
				}
			}
		case e2ebench.JetStream:
			fp.System, fp.Process = "jetstream", "nats-server ("+t.SyncMode+", embedded in a fibril helper process)"
		}
		fmt.Fprintf(stderr, "footprint of %s: idle for %v ...\n", fp.Process, o.idle/2+2*o.idle)
		if err := measureIdle(ctx, o, s, &fp); err != nil {
			return fmt.Errorf("footprint of %s: %w", fp.Process, err)
		}
		if o.startupBytes > 0 && (fp.System == "fibril" && o.addr == "" || fp.System == "jetstream" && s.name == "jetstream-default") {
			fmt.Fprintf(stderr, "footprint of %s: start-up with %s stored ...\n", fp.Process, byteUnit(int64(o.startupBytes)))
			secs, err := measureStartup(ctx, o, sys, fp.System, base)
			if err != nil {
				return fmt.Errorf("start-up of %s: %w", fp.Process, err)
			}
			fp.StartupSeconds, fp.StartupBytes = secs, int64(o.startupBytes)
		}
		if o.queues > 0 && fp.System == "fibril" && o.addr == "" {
			fmt.Fprintf(stderr, "footprint of %s: %d empty queues ...\n", fp.Process, o.queues)
			if err := measureQueues(ctx, o, sys, base, &fp, stderr); err != nil {
				return fmt.Errorf("footprint of %d queues: %w", o.queues, err)
			}
		}
		res.Footprints = append(res.Footprints, fp)
		if err := benchutil.WriteJSONLine(stdout, fp); err != nil {
			return err
		}
	}
	return nil
}

func (s *benchSystems) hasSystem(name string) bool {
	for _, x := range s.list {
		if x.name == name {
			return true
		}
	}
	return false
}

// measureIdle stores a few messages, then leaves the broker idle with the
// connections open: one window read from /proc, a second one under strace
// for the sync calls (ptrace itself wakes the process, so the windows do
// not overlap).
func measureIdle(ctx context.Context, o *benchOptions, s benchSystem, fp *e2ebench.Footprint) error {
	st, err := e2ebench.Fill(ctx, s.target, "bench-idle-"+s.name, 100, 1, 16, o.payload)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := pause(ctx, o.idle/2); err != nil { // let the background sync settle
		return err
	}
	before, err := e2ebench.SampleProc(s.pid())
	if err != nil {
		return err
	}
	if err := pause(ctx, o.idle); err != nil {
		return err
	}
	after, err := e2ebench.SampleProc(s.pid())
	if err != nil {
		return err
	}
	secs := after.At.Sub(before.At).Seconds()
	fp.IdleRSS = after.RSS
	fp.IdleWakeups = float64(after.CtxSwitches-before.CtxSwitches) / secs
	fp.IdleWrites = float64(after.WriteBytes-before.WriteBytes) / secs
	fp.IdleSyncs, err = countSyncs(ctx, s.pid(), o.idle)
	return err
}

// pause waits d unless ctx ends first: the length of a measurement window.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// measureStartup fills a fresh broker of the given system with
// --startup-bytes of messages (fibrild: one active segment, twice that
// size), stops it cleanly and times a start until it accepts clients.
// Its data directory starts empty and is removed afterwards: in a --dir
// used again, what an earlier run stored would be started over too.
func measureStartup(ctx context.Context, o *benchOptions, sys *benchSystems, system, base string) (float64, error) {
	n := int(int64(o.startupBytes) / int64(o.payload))
	dir := filepath.Join(base, "startup-nats")
	if system == "fibril" {
		dir = filepath.Join(base, "startup-fibrild")
	}
	if err := os.RemoveAll(dir); err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	switch system {
	case "fibril":
		seg := benchutil.ByteSize(max(2*int64(o.startupBytes), 16<<20))
		segFlag := []string{"--storage.segment_size", seg.String()}
		p, err := startBenchFibrild(ctx, sys.fibrildBin, dir, segFlag...)
		if err != nil {
			return 0, err
		}
		st, err := e2ebench.Fill(ctx, e2ebench.Fibril{Addr: p.Addr}, "startup", n, o.publishers, o.window, o.payload)
		if err != nil {
			p.Kill()
			return 0, err
		}
		st.Close()
		if err := p.Stop(time.Minute); err != nil {
			return 0, err
		}
		start := time.Now()
		p, err = startBenchFibrild(ctx, sys.fibrildBin, dir, segFlag...)
		if err != nil {
			return 0, err
		}
		secs := time.Since(start).Seconds()
		return secs, p.Stop(time.Minute)
	default:
		n1, err := startNATSChild(ctx, dir, "default")
		if err != nil {
			return 0, err
		}
		st, err := e2ebench.Fill(ctx, e2ebench.JetStream{URL: n1.url, Keep: true}, "startup", n, o.publishers, o.window, o.payload)
		if err != nil {
			n1.kill()
			return 0, err
		}
		st.Close()
		if err := n1.stop(); err != nil {
			return 0, err
		}
		start := time.Now()
		n2, err := startNATSChild(ctx, dir, "default")
		if err != nil {
			return 0, err
		}
		secs := time.Since(start).Seconds()
		return secs, n2.stop()
	}
}

// measureQueues declares --queues empty buffered queues on a fresh fibrild
// and, once it has been idle for --idle, reports what each costs it: the
// data directory's allocated blocks and the open files, both beyond the
// empty broker's, per queue, and the RSS with all of them.
func measureQueues(ctx context.Context, o *benchOptions, sys *benchSystems, base string, fp *e2ebench.Footprint, stderr io.Writer) error {
	dir := filepath.Join(base, "queues-fibrild")
	if err := os.RemoveAll(dir); err != nil { // left by an earlier run in --dir
		return err
	}
	p, err := startBenchFibrild(ctx, sys.fibrildBin, dir)
	if err != nil {
		return err
	}
	defer func() {
		p.Kill()
		_ = os.RemoveAll(dir)
	}()
	// The baseline is taken once the empty broker has been idle as long as
	// the queues will have been: a descriptor its start-up still held when
	// it logged that it listens is no queue's.
	if err := pause(ctx, o.idle); err != nil {
		return err
	}
	before, err := e2ebench.SampleProc(p.Pid())
	if err != nil {
		return err
	}
	diskBefore, err := allocatedBytes(dir)
	if err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := client.Dial(ctx, p.Addr, client.Options{ClientName: "fibril-bench", DisableReconnect: true, Logger: quiet})
	if err != nil {
		return fmt.Errorf("dial %s: %w", p.Addr, err)
	}
	for i := range o.queues {
		if _, err := c.DeclareQueue(ctx, client.Queue(fmt.Sprintf("idle-%05d", i)).Buffered()); err != nil {
			c.Close()
			return err
		}
		if (i+1)%100 == 0 {
			fmt.Fprintf(stderr, "  %d of %d declared\n", i+1, o.queues)
		}
	}
	if err := c.Close(); err != nil {
		return err
	}
	if err := pause(ctx, o.idle); err != nil {
		return err
	}
	after, err := e2ebench.SampleProc(p.Pid())
	if err != nil {
		return err
	}
	diskAfter, err := allocatedBytes(dir)
	if err != nil {
		return err
	}
	fp.Queues = o.queues
	fp.QueueDiskBytes = (diskAfter - diskBefore) / int64(o.queues)
	fp.QueueOpenFiles = float64(after.OpenFiles-before.OpenFiles) / float64(o.queues)
	fp.QueuesRSS = after.RSS
	return p.Stop(time.Minute)
}

// allocatedBytes is the disk the files under dir take: their allocated
// blocks, preallocated space included, not their sizes.
func allocatedBytes(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		} else {
			total += info.Size()
		}
		return nil
	})
	return total, err
}
