package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/fibril-edge/fibril/tools/fibril/internal/benchutil"
	"github.com/fibril-edge/fibril/tools/fibril/internal/e2ebench"
)

// runFootprint prints one footprint line per broker process: fibrild
// (when started here) and each NATS server.
func runFootprint(ctx context.Context, o *benchOptions, sys *benchSystems, base string, env e2ebench.Env, res *e2ebench.Results, stdout, stderr io.Writer) error {
	for _, s := range sys.list {
		if s.pid == 0 || s.name == "fibril-buffered" && sys.hasSystem("fibril-durable") {
			continue // one line per process; fibril's two modes share one
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
	before, err := e2ebench.SampleProc(s.pid)
	if err != nil {
		return err
	}
	if err := pause(ctx, o.idle); err != nil {
		return err
	}
	after, err := e2ebench.SampleProc(s.pid)
	if err != nil {
		return err
	}
	secs := after.At.Sub(before.At).Seconds()
	fp.IdleRSS = after.RSS
	fp.IdleWakeups = float64(after.CtxSwitches-before.CtxSwitches) / secs
	fp.IdleWrites = float64(after.WriteBytes-before.WriteBytes) / secs
	fp.IdleSyncs, err = countSyncs(ctx, s.pid, o.idle)
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
func measureStartup(ctx context.Context, o *benchOptions, sys *benchSystems, system, base string) (float64, error) {
	n := int(int64(o.startupBytes) / int64(o.payload))
	switch system {
	case "fibril":
		dir := filepath.Join(base, "startup-fibrild")
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
		dir := filepath.Join(base, "startup-nats")
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
