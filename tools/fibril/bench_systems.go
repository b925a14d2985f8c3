package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fibril-edge/fibril/internal/fibrildproc"
	"github.com/fibril-edge/fibril/internal/loopback"
	"github.com/fibril-edge/fibril/tools/fibril/internal/benchutil"
	"github.com/fibril-edge/fibril/tools/fibril/internal/e2ebench"
	"github.com/fibril-edge/fibril/tools/fibril/internal/floor"
)

// benchSystem is one entry of --systems: a Target and the processes that
// serve it (none when not measured; a cluster's nodes).
type benchSystem struct {
	name   string
	target e2ebench.Target
	pids   []int
}

// pid is the one process that serves the system, or 0 (none, or a
// cluster's several).
func (s benchSystem) pid() int {
	if len(s.pids) != 1 {
		return 0
	}
	return s.pids[0]
}

// benchSystems is every broker process the bench started.
type benchSystems struct {
	list       []benchSystem
	fibrild    *fibrildproc.Process
	fibrildBin string
	cluster    []*fibrildproc.Process // --cluster's nodes
	nats       map[string]*natsChild  // by sync mode
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
			sys = benchSystem{name: name, target: e2ebench.Fibril{Addr: addr, Admin: admin, Durable: name == "fibril-durable",
				Queues: o.spread}}
			if pid != 0 {
				sys.pids = []int{pid}
			}
		case "cluster-durable", "cluster-buffered":
			if s.cluster == nil {
				if s.fibrildBin == "" {
					if s.fibrildBin, err = findFibrild(o.fibrild); err != nil {
						return nil, err
					}
				}
				fmt.Fprintf(stderr, "starting a cluster of %d fibrild nodes ...\n", o.cluster)
				if s.cluster, err = startBenchCluster(ctx, s.fibrildBin, filepath.Join(base, "cluster"), o.cluster); err != nil {
					return nil, err
				}
			}
			var addrs []string
			for _, p := range s.cluster {
				addrs = append(addrs, p.Addr)
				sys.pids = append(sys.pids, p.Pid())
			}
			// A majority of the nodes hold each queue's copies.
			policy := fmt.Sprintf("replica_buffered:%d", o.cluster/2+1)
			if name == "cluster-durable" {
				policy = "majority_durable"
			}
			sys.name = name
			sys.target = e2ebench.Fibril{Addr: strings.Join(addrs, ","), Admin: s.cluster[0].Admin,
				Durable: name == "cluster-durable", Nodes: o.cluster, Policy: policy, Queues: o.spread}
		case "jetstream-always", "jetstream-default":
			mode := map[string]string{"jetstream-always": "always", "jetstream-default": "default"}[name]
			n, err := startNATSChild(ctx, filepath.Join(base, "nats-"+mode), mode)
			if err != nil {
				return nil, err
			}
			s.nats[mode] = n
			sys = benchSystem{name: name, pids: []int{n.pid()}, target: e2ebench.JetStream{URL: n.url, SyncMode: mode + "-sync"}}
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

// startBenchCluster starts n fibrild nodes on loopback, each with its data
// in dir/nI, bootstrapped into one cluster.
func startBenchCluster(ctx context.Context, bin, dir string, n int) ([]*fibrildproc.Process, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ports, err := loopback.Ports(n) // outside the range the nodes' own :0 ports come from
	if err != nil {
		return nil, fmt.Errorf("pick the cluster ports: %w", err)
	}
	nodes := make([]*fibrildproc.Process, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		var peers []string
		for j, p := range ports {
			if j != i {
				peers = append(peers, fmt.Sprintf("n%d@%s", j+1, p))
			}
		}
		wg.Go(func() {
			nodes[i], errs[i] = startBenchFibrild(ctx, bin, filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
				"--cluster.node_id", fmt.Sprintf("n%d", i+1), "--cluster.listen", ports[i],
				"--cluster.peers", strings.Join(peers, ","), "--cluster.bootstrap", "true")
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, p := range nodes {
			if p != nil {
				p.Kill()
			}
		}
		return nil, err
	}
	return nodes, nil
}

// stop ends every process the bench started.
func (s *benchSystems) stop() error {
	var errs []error
	for _, p := range s.cluster {
		errs = append(errs, p.Stop(30*time.Second))
	}
	s.cluster = nil
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
