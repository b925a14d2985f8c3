package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/fibril-edge/fibril/internal/fibrildproc"
	"github.com/fibril-edge/fibril/tools/fibril/internal/benchutil"
	"github.com/fibril-edge/fibril/tools/fibril/internal/e2ebench"
	"github.com/fibril-edge/fibril/tools/fibril/internal/floor"
)

// benchSystem is one entry of --systems: a Target and the process that
// serves it (pid 0 when not measured).
type benchSystem struct {
	name   string
	target e2ebench.Target
	pid    int
}

// benchSystems is every broker process the bench started.
type benchSystems struct {
	list       []benchSystem
	fibrild    *fibrildproc.Process
	fibrildBin string
	nats       map[string]*natsChild // by sync mode
}

// benchEnv describes the machine and measures the fsync floor in dir.
func benchEnv(dir string, quick bool) (e2ebench.Env, error) {
	samples := 200
	if quick {
		samples = 30
	}
	syncs, err := floor.FdatasyncLatencies(dir, samples, 1024)
	if err != nil {
		return e2ebench.Env{}, fmt.Errorf("measure the fsync floor in %s: %w", dir, err)
	}
	return e2ebench.Env{Env: benchutil.DetectEnv(dir), FsyncP50: benchutil.Micros(benchutil.Summarize(syncs).P50)}, nil
}

// startSystems starts (or, with --addr, connects to) the brokers named by
// --systems.
func startSystems(ctx context.Context, o *benchOptions, base string, stderr io.Writer) (_ *benchSystems, err error) {
	s := &benchSystems{nats: map[string]*natsChild{}}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	for _, name := range o.systems {
		var sys benchSystem
		switch name {
		case "fibril-durable", "fibril-buffered":
			addr, admin, pid := o.addr, o.admin, o.pid
			if addr == "" {
				if s.fibrild == nil {
					if s.fibrildBin, err = findFibrild(o.fibrild); err != nil {
						return nil, err
					}
					s.fibrild, err = startBenchFibrild(ctx, s.fibrildBin, filepath.Join(base, "fibrild"))
					if err != nil {
						return nil, err
					}
				}
				addr, admin, pid = s.fibrild.Addr, s.fibrild.Admin, s.fibrild.Pid()
			}
			sys = benchSystem{name: name, pid: pid,
				target: e2ebench.Fibril{Addr: addr, Admin: admin, Durable: name == "fibril-durable"}}
		case "jetstream-always", "jetstream-default":
			mode := map[string]string{"jetstream-always": "always", "jetstream-default": "default"}[name]
			n, err := startNATSChild(ctx, filepath.Join(base, "nats-"+mode), mode)
			if err != nil {
				return nil, err
			}
			s.nats[mode] = n
			sys = benchSystem{name: name, pid: n.pid(), target: e2ebench.JetStream{URL: n.url, SyncMode: mode + "-sync"}}
		}
		s.list = append(s.list, sys)
	}
	return s, nil
}

// startBenchFibrild starts fibrild on loopback with data in dir.
func startBenchFibrild(ctx context.Context, bin, dir string, extra ...string) (*fibrildproc.Process, error) {
	args := append([]string{"--storage.min_free", "0"}, extra...)
	p, err := fibrildproc.Start(ctx, fibrildproc.Options{Bin: bin, DataDir: dir, Args: args})
	if err != nil {
		return nil, fmt.Errorf("start fibrild: %w", err)
	}
	return p, nil
}

// stop ends every process the bench started.
func (s *benchSystems) stop() error {
	var errs []error
	if s.fibrild != nil {
		errs = append(errs, s.fibrild.Stop(30*time.Second))
		s.fibrild = nil
	}
	for mode, n := range s.nats {
		errs = append(errs, n.stop())
		delete(s.nats, mode)
	}
	return errors.Join(errs...)
}

// findFibrild returns the fibrild binary: flag, else beside this
// executable, else on PATH.
func findFibrild(flag string) (string, error) {
	if flag != "" {
		if _, err := os.Stat(flag); err != nil {
			return "", withExit(exitNotFound, fmt.Errorf("--fibrild: %w", err))
		}
		return flag, nil
	}
	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), "fibrild")
		if _, err := os.Stat(beside); err == nil {
			return beside, nil
		}
	}
	if p, err := exec.LookPath("fibrild"); err == nil {
		return p, nil
	}
	return "", withExit(exitNotFound, errors.New("no fibrild beside this binary or on PATH: pass --fibrild PATH, or --addr for a running one"))
}
