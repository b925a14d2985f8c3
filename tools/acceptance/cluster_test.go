package acceptance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/internal/fibrildproc"
	"github.com/fibril-edge/fibril/internal/loopback"
	"github.com/fibril-edge/fibril/wal"
)

// Cluster cases (docs/reliability.md, "Cluster failover"): three fibrild
// processes on loopback, each node's data on its own loop-mounted XFS
// image, the queues' owners lost under load, and the history checker
// judging what the clients were promised. Clients take every node's
// address, and publishers and consumers move with the queues.

// clusterEnv is a three-node cluster under test.
type clusterEnv struct {
	t      *testing.T
	h      *History
	seed   uint64
	nodes  []*Broker
	ids    []string
	loops  []*LoopFS
	sched  []string
	start  time.Time
	addrs  string // every node's client address, comma-separated
	byAddr map[string]int
	fs     string // the loop images' file system
}

// clusterFS is the file system of the cluster cases' node images: XFS,
// or what FIBRIL_CLUSTER_FS names ("xfs" or "ext4"; make cluster-ext4).
func clusterFS(t *testing.T) string {
	t.Helper()
	switch fs := os.Getenv("FIBRIL_CLUSTER_FS"); fs {
	case "", "xfs":
		return "xfs"
	case "ext4":
		return fs
	default:
		t.Fatalf("FIBRIL_CLUSTER_FS=%q: want xfs or ext4", fs)
		return ""
	}
}

// newClusterEnv starts three nodes, each on its own loop image of fs,
// running fibrild built with tags.
func newClusterEnv(t *testing.T, ctx context.Context, fs string, tags ...string) *clusterEnv {
	t.Helper()
	e := prepareClusterEnv(t, ctx, fs, tags...)
	e.startAll(ctx)
	return e
}

// prepareClusterEnv is newClusterEnv without starting the nodes.
func prepareClusterEnv(t *testing.T, ctx context.Context, fs string, tags ...string) *clusterEnv {
	t.Helper()
	requireAcceptanceGate(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "fibrild")
	if err := fibrildproc.BuildWith(ctx, "../fibrild", bin, fibrildproc.BuildOptions{Tags: tags}); err != nil {
		t.Fatal(err)
	}
	h, err := CreateHistory(filepath.Join(dir, "history.jsonl"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Close()
		if t.Failed() { // the history goes with the test's directory: keep a copy
			name := filepath.Join(os.TempDir(), fmt.Sprintf("fibril-%s-history-%d.jsonl",
				strings.ReplaceAll(t.Name(), "/", "_"), time.Now().Unix()))
			if b, err := os.ReadFile(filepath.Join(dir, "history.jsonl")); err == nil && os.WriteFile(name, b, 0o644) == nil {
				t.Logf("the history: %s", name)
			}
		}
	})
	e := &clusterEnv{t: t, h: h, seed: caseSeed(t), start: time.Now(), byAddr: map[string]int{}, fs: fs}
	ports, err := loopback.Ports(3) // outside the range the nodes' own :0 ports come from
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		id := fmt.Sprintf("n%d", i+1)
		var peers []string
		for j, p := range ports {
			if j != i {
				peers = append(peers, fmt.Sprintf("n%d@%s", j+1, p))
			}
		}
		l, err := NewLoopFS(ctx, LoopOptions{FS: fs, Dir: filepath.Join(dir, id)})
		if err != nil {
			t.Fatalf("THIS CASE NEEDS A LOOP-MOUNTED %s FILE SYSTEM PER NODE AND CANNOT HAVE ONE: %v", strings.ToUpper(fs), err)
		}
		t.Cleanup(func() {
			if err := l.Close(); err != nil {
				t.Errorf("loop fs of %s: %v", id, err)
			}
		})
		b := &Broker{Bin: bin, DataDir: filepath.Join(l.Mnt, "data"), Args: []string{
			"--cluster.node_id", id, "--cluster.listen", ports[i], "--cluster.peers", strings.Join(peers, ","),
			"--cluster.bootstrap", "true", "--storage.segment_size", "1MiB"}}
		t.Cleanup(b.Kill) // before the loop file system's Close
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s's last log lines:\n%s", id, lastLogLines(b, 80))
				keepDump(t, id, b)
			}
		})
		e.nodes, e.ids, e.loops = append(e.nodes, b), append(e.ids, id), append(e.loops, l)
	}
	return e
}

// startAll starts every node of the cluster, all at once: a node that
// joins with its data serves only once the others have made it a member.
func (e *clusterEnv) startAll(ctx context.Context) {
	t := e.t
	t.Helper()
	errs := make([]error, len(e.nodes))
	var wg sync.WaitGroup
	for i, b := range e.nodes {
		wg.Go(func() { errs[i] = b.Start(ctx) })
	}
	wg.Wait()
	var addrs []string
	for i, b := range e.nodes {
		if errs[i] != nil {
			t.Fatalf("start %s: %v", e.ids[i], errs[i])
		}
		addrs = append(addrs, b.Addr())
		e.byAddr[b.Addr()] = i
	}
	e.addrs = strings.Join(addrs, ",")
	e.h.Note("cluster case %s seed %d fs %q nodes %s", t.Name(), e.seed, e.fs, e.addrs)
}

// keepDump stops a failed case's node with a goroutine dump and keeps
// its whole log, the dump included, in a file outside the test's
// directories (those go with the test), naming the file in the test log.
func keepDump(t *testing.T, id string, b *Broker) {
	p := b.Proc()
	if p == nil {
		return
	}
	name := filepath.Join(os.TempDir(), fmt.Sprintf("fibril-%s-%s-%d.log",
		strings.ReplaceAll(t.Name(), "/", "_"), id, time.Now().Unix()))
	if err := os.WriteFile(name, []byte(p.Dump(10*time.Second)), 0o644); err != nil {
		t.Logf("keep %s's log: %v", id, err)
		return
	}
	t.Logf("%s's whole log, with a goroutine dump if it was running: %s", id, name)
}

func (e *clusterEnv) schedule(format string, args ...any) {
	s := fmt.Sprintf("%7.3fs ", time.Since(e.start).Seconds()) + fmt.Sprintf(format, args...)
	e.sched = append(e.sched, s)
	e.h.Note("schedule: %s", s)
	e.t.Log(s)
}

// clusterView is the part of GET /api/cluster the cases read.
type clusterView struct {
	Leader  string `json:"leader"`
	Members []struct {
		ID         string `json:"id"`
		ClientAddr string `json:"client_addr"`
	} `json:"members"`
	Queues []struct {
		Name       string `json:"name"`
		Partitions []struct {
			Owner      string `json:"owner"`
			Epoch      uint64 `json:"epoch"`
			Recovering bool   `json:"recovering"`
		} `json:"partitions"`
	} `json:"queues"`
}

// view reads the cluster from the first node that answers.
func (e *clusterEnv) view(ctx context.Context) (clusterView, error) {
	var last error
	for _, b := range e.nodes {
		admin := b.Admin()
		if admin == "" {
			continue
		}
		// A paused node (SIGSTOP) accepts and never answers: ask the
		// next one after a while.
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, admin+"/api/cluster", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			last = err
			continue
		}
		var v clusterView
		err = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		cancel()
		if err == nil && v.Leader != "" {
			return v, nil
		}
		last = fmt.Errorf("no leader known (decode: %v)", err)
	}
	return clusterView{}, fmt.Errorf("acceptance: no node shows the cluster: %w", last)
}

// owner waits until queue is served (no partition recovering) at an
// epoch above after, and returns its owner's index and epoch.
func (e *clusterEnv) owner(ctx context.Context, queue string, after uint64) (int, uint64) {
	e.t.Helper()
	for {
		if v, err := e.view(ctx); err == nil {
			for _, q := range v.Queues {
				if q.Name != queue || len(q.Partitions) == 0 {
					continue
				}
				p := q.Partitions[0]
				settled := p.Epoch > after
				for _, pp := range q.Partitions {
					settled = settled && !pp.Recovering && pp.Owner == p.Owner
				}
				if settled {
					for i, id := range e.ids {
						if id == p.Owner {
							return i, p.Epoch
						}
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("queue %s not served past epoch %d: %v\nschedule:\n%s", queue, after, ctx.Err(), strings.Join(e.sched, "\n"))
		case <-time.After(50 * time.Millisecond): // polling the admin API of other processes
		}
	}
}

// verify drains every queue through its owner and checks the history.
func (e *clusterEnv) verify(ctx context.Context, queues []QueueSpec) Report {
	e.t.Helper()
	for _, q := range queues {
		i, _ := e.owner(ctx, q.Name, 0)
		if _, err := Drain(ctx, e.h, e.addrs, e.nodes[i].Admin(), []QueueSpec{q}); err != nil {
			e.t.Fatalf("drain %s on %s: %v\nschedule:\n%s", q.Name, e.ids[i], err, strings.Join(e.sched, "\n"))
		}
	}
	return judge(e.t, e.h, queues, e.seed, e.sched)
}

// Cluster case 1: the owner of a queue is SIGKILLed under load while its
// followers are up, once per mode. Nothing confirmed may be lost; the
// publishes go on through the other nodes; the time from the kill to the
// queue's first new confirm is reported (aim: under 5 s with the default
// failover timeout of 3 s).
func TestClusterOwnerKill(t *testing.T) {
	ownerFaultCase(t, "ck", func(ctx context.Context, e *clusterEnv, i int, queue string) {
		e.nodes[i].Kill()
		e.h.Fault("SIGKILL " + e.ids[i])
	})
}

// Cluster case 2: the owner's image loses its power (XFS shut down
// without a log flush, as xfs_io -x -c shutdown does) under load, once
// per mode. Nothing confirmed may be lost, buffered included: the
// followers hold written copies and seal them with a sync.
func TestClusterOwnerPowerCut(t *testing.T) {
	ownerFaultCase(t, "cp", func(ctx context.Context, e *clusterEnv, i int, queue string) {
		e.powerCut(ctx, i)
	})
}

// Cluster case 3: every node's image loses its power at once under load.
// Durable: nothing confirmed may be lost. Buffered: only what no copy had
// synced, judged against the owner's durable frontier recorded right
// before the cut: no copy knows any more what it had written, so the
// recovery waits for every copy and keeps the longest surviving history.
// The queues then serve again and every copy ends identical.
func TestClusterSitePowerCut(t *testing.T) {
	ctx := caseCtx(t, 4*time.Minute)
	e := newClusterEnv(t, ctx, clusterFS(t))
	queues := bothModes("site")
	r := e.load(ctx, queues, "site")
	defer r.Stop()
	epochs := map[string]uint64{}
	for _, q := range queues {
		i, epoch := e.owner(ctx, q.Name, 0)
		epochs[q.Name] = epoch
		if err := RecordFrontiers(ctx, e.h, e.nodes[i].Admin(), []QueueSpec{q}); err != nil {
			t.Fatalf("frontiers of %s on its owner %s: %v", q.Name, e.ids[i], err)
		}
	}
	e.h.CutBegins()
	for i := range e.nodes {
		if err := e.loops[i].PowerCut(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i := range e.nodes {
		e.nodes[i].Kill()
	}
	e.h.Fault("power cut of every node")
	e.schedule("power cut of every node")
	for i := range e.nodes {
		if err := e.loops[i].Unmount(ctx); err != nil {
			t.Fatal(err)
		}
		if err := e.loops[i].Mount(ctx); err != nil {
			t.Fatal(err)
		}
	}
	e.h.Restart()
	for i := range e.nodes {
		if err := e.nodes[i].Start(ctx); err != nil {
			t.Fatalf("restart %s: %v", e.ids[i], err)
		}
	}
	e.schedule("every node restarted")
	for _, q := range queues {
		i, epoch := e.owner(ctx, q.Name, epochs[q.Name])
		e.schedule("%s served by %s at epoch %d", q.Name, e.ids[i], epoch)
	}
	rep := e.finish(ctx, r, queues, "the cut")
	logLosses(t, rep, queues)
	e.copiesIdentical(queues)
}

// Cluster case 7 in small: the owner is paused (SIGSTOP) under load past
// the failover timeout, the queue moves, and the old owner runs again
// (SIGCONT) still believing it owns the queue. The seals fence it: it
// confirms nothing after them (a confirm it gave would be a record the
// new owner's history lacks, which the checker counts as lost), nothing
// confirmed is lost, and every copy ends identical.
func TestClusterPausedOwner(t *testing.T) {
	e := ownerFaultCase(t, "cs", func(ctx context.Context, e *clusterEnv, i int, queue string) {
		_, epoch := e.owner(ctx, queue, 0)
		p := e.nodes[i].Proc()
		if err := syscall.Kill(p.Pid(), syscall.SIGSTOP); err != nil {
			e.t.Fatal(err)
		}
		e.h.Fault("SIGSTOP " + e.ids[i])
		e.schedule("SIGSTOP %s", e.ids[i])
		next, epoch2 := e.owner(ctx, queue, epoch)
		if err := syscall.Kill(p.Pid(), syscall.SIGCONT); err != nil {
			e.t.Fatal(err)
		}
		e.schedule("SIGCONT %s once %s served %s at epoch %d", e.ids[i], e.ids[next], queue, epoch2)
	})
	e.copiesIdentical(bothModes("cs"))
}

// Cluster case 4, first order: the owner's image loses its power and the
// node is back (a shorter log: what it had not synced is gone) before
// the leader could notice, within the failover timeout. It never resumes
// at its old end: its reopened log is a new instance, which asks for a
// recovery, and the followers' longer copies win. Nothing confirmed may
// be lost, and every copy ends identical.
func TestClusterOwnerBackShorter(t *testing.T) {
	e := ownerFaultCase(t, "cb", func(ctx context.Context, e *clusterEnv, i int, queue string) {
		e.powerCut(ctx, i)
		e.h.Restart()
		if err := e.nodes[i].Start(ctx); err != nil {
			e.t.Fatalf("restart %s: %v", e.ids[i], err)
		}
	})
	e.copiesIdentical(bothModes("cb"))
}

// Cluster case 5: a follower's data directory is wiped (raft state,
// copies, everything) and the node rejoins under load; moments later the
// queue's owner is SIGKILLed and comes back after the failover timeout.
// The wiped node's new copies hold nothing it once acknowledged until
// they caught up, so it must never stand in for the records it lost:
// nothing confirmed may be lost, and every copy ends identical.
func TestClusterWipedFollowerRejoins(t *testing.T) {
	ctx := caseCtx(t, 4*time.Minute)
	e := newClusterEnv(t, ctx, clusterFS(t))
	queues := bothModes("cw")
	r := e.load(ctx, queues, "cw")
	defer r.Stop()
	o, epoch := e.owner(ctx, queues[0].Name, 0)
	f := (o + 1) % len(e.nodes)
	e.nodes[f].Kill()
	if err := os.RemoveAll(e.nodes[f].DataDir); err != nil {
		t.Fatal(err)
	}
	e.h.Fault("SIGKILL and data directory wiped: " + e.ids[f])
	e.h.Restart()
	if err := e.nodes[f].Start(ctx); err != nil {
		t.Fatalf("restart %s wiped: %v", e.ids[f], err)
	}
	e.schedule("%s wiped and restarted", e.ids[f])
	if err := r.WaitConfirmed(ctx, r.Counts().Confirmed+100); err != nil {
		t.Fatalf("after the wipe: %v", err)
	}
	e.nodes[o].Kill()
	e.h.Fault("SIGKILL " + e.ids[o])
	e.schedule("SIGKILL %s, owner of %s at epoch %d", e.ids[o], queues[0].Name, epoch)
	if err := pause(ctx, 5*time.Second); err != nil { // past the 3 s failover timeout
		t.Fatal(err)
	}
	e.h.Restart()
	if err := e.nodes[o].Start(ctx); err != nil {
		t.Fatalf("restart %s: %v", e.ids[o], err)
	}
	e.schedule("%s restarted", e.ids[o])
	for _, q := range queues {
		i, ep := e.owner(ctx, q.Name, 0)
		e.schedule("%s served by %s at epoch %d", q.Name, e.ids[i], ep)
	}
	rep := e.finish(ctx, r, queues, "the owner's return")
	if len(rep.Lost) != 0 {
		t.Fatalf("lost %d confirmed messages", len(rep.Lost))
	}
	e.copiesIdentical(queues)
}

// Cluster case 6: the owner's log latches under load (every fdatasync of
// the queue's segment files fails: fibrild built with -tags faultinject,
// armed through POST /debug/fault). The owner stops confirming, asks for
// its queue's recovery itself (its node still answers the leader), and a
// follower takes over; the old owner, disarmed, seals its copy cut back
// to its last sync and follows. Nothing confirmed may be lost, and every
// copy ends identical.
func TestClusterLatchedOwner(t *testing.T) {
	e := ownerFaultCase(t, "cl", func(ctx context.Context, e *clusterEnv, i int, queue string) {
		admin := e.nodes[i].Admin()
		_, epoch := e.owner(ctx, queue, 0)
		if status, err := adminJSON(ctx, admin, http.MethodPost, "/debug/fault", faultReq{Queue: queue, Op: "sync"}, nil); err != nil || status != http.StatusOK {
			e.t.Fatalf("arm a sync fault on %s: %d %v", e.ids[i], status, err)
		}
		e.h.Fault("sync fault on " + e.ids[i] + "'s log of " + queue)
		// Disarmed once the queue has moved: the node's copies from then on
		// are a follower's.
		e.owner(ctx, queue, epoch)
		if _, err := adminJSON(ctx, admin, http.MethodPost, "/debug/fault", faultReq{Op: "off"}, nil); err != nil {
			e.t.Fatalf("disarm the fault on %s: %v", e.ids[i], err)
		}
	}, "faultinject")
	e.copiesIdentical(bothModes("cl"))
}

// load starts 300 publishes/s per publisher on queues through every
// node's address, and returns once 600 of them are confirmed.
func (e *clusterEnv) load(ctx context.Context, queues []QueueSpec, prefix string) *Runner {
	e.t.Helper()
	r, err := StartLoad(ctx, LoadOptions{Addr: e.addrs, History: e.h, Queues: queues,
		Seed: e.seed, Prefix: prefix, Rate: 300})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := r.WaitConfirmed(ctx, r.Counts().Confirmed+600); err != nil {
		r.Stop()
		e.t.Fatalf("before the fault: %v", err)
	}
	return r
}

// powerCut cuts node i's power: its image shuts down without a log flush
// (what was not synced is gone), the process is killed, and the image is
// mounted again; the node is not restarted.
func (e *clusterEnv) powerCut(ctx context.Context, i int) {
	e.t.Helper()
	e.h.CutBegins()
	if err := e.loops[i].PowerCut(ctx); err != nil {
		e.t.Fatal(err)
	}
	e.nodes[i].Kill()
	e.h.Fault("power cut of " + e.ids[i])
	if err := e.loops[i].Unmount(ctx); err != nil {
		e.t.Fatal(err)
	}
	if err := e.loops[i].Mount(ctx); err != nil {
		e.t.Fatal(err)
	}
}

// finish waits for 300 more confirms (the cluster serves again after
// what the case did), stops the load, waits for every copy to catch up
// and checks the history.
func (e *clusterEnv) finish(ctx context.Context, r *Runner, queues []QueueSpec, after string) Report {
	e.t.Helper()
	if err := r.WaitConfirmed(ctx, r.Counts().Confirmed+300); err != nil {
		e.t.Fatalf("after %s: %v", after, err)
	}
	e.stopLoad(r)
	e.copiesCaughtUp(ctx)
	return e.verify(ctx, queues)
}

// stopLoad stops r and fails the case if the cluster left publishes
// unanswered.
func (e *clusterEnv) stopLoad(r *Runner) {
	e.t.Helper()
	r.Stop()
	if n := r.Unanswered(); n > 0 {
		e.t.Fatalf("%d publishes unanswered a minute after the load stopped\nschedule:\n%s", n, strings.Join(e.sched, "\n"))
	}
}

// ownerFaultCase loads a durable and a buffered queue through every
// node's address, applies fault to each queue's owner in turn, and
// checks that the queue moves, serves, and loses nothing confirmed once
// the faulted node is back.
func ownerFaultCase(t *testing.T, prefix string, fault func(ctx context.Context, e *clusterEnv, i int, queue string), tags ...string) *clusterEnv {
	ctx := caseCtx(t, 4*time.Minute)
	e := newClusterEnv(t, ctx, clusterFS(t), tags...)
	queues := bothModes(prefix)
	var runners []*Runner
	for _, q := range queues {
		r, err := StartLoad(ctx, LoadOptions{Addr: e.addrs, History: e.h, Queues: []QueueSpec{q},
			Seed: e.seed, Prefix: prefix + q.Name, Rate: 300})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Stop()
		runners = append(runners, r)
	}
	for qi, q := range queues {
		r := runners[qi]
		if err := r.WaitConfirmed(ctx, r.Counts().Confirmed+300); err != nil {
			t.Fatalf("%s before the fault: %v", q.Name, err)
		}
		i, epoch := e.owner(ctx, q.Name, 0)
		start := time.Now()
		fault(ctx, e, i, q.Name)
		e.schedule("fault on %s, owner of %s at epoch %d", e.ids[i], q.Name, epoch)
		// The first confirm after the new owner serves: confirms the old
		// owner had on the wire when it failed do not count.
		next, epoch2 := e.owner(ctx, q.Name, epoch)
		served := time.Since(start)
		if err := r.WaitConfirmed(ctx, r.Counts().Confirmed+1); err != nil {
			t.Fatalf("%s after the fault on its owner: %v", q.Name, err)
		}
		e.schedule("%s: served by %s at epoch %d %.2fs after the fault, first new confirm at %.2fs",
			q.Name, e.ids[next], epoch2, served.Seconds(), time.Since(start).Seconds())
		if err := r.WaitConfirmed(ctx, r.Counts().Confirmed+300); err != nil {
			t.Fatalf("%s after the failover: %v", q.Name, err)
		}
		if p := e.nodes[i].Proc(); p != nil {
			select {
			case <-p.Exited():
				e.h.Restart()
				if err := e.nodes[i].Start(ctx); err != nil {
					t.Fatalf("restart %s: %v", e.ids[i], err)
				}
				e.schedule("%s restarted", e.ids[i])
			default: // the fault brought it back already
			}
		}
		// The next fault finds the followers up: caught up, holding what
		// their owners hold.
		e.copiesCaughtUp(ctx)
	}
	for _, r := range runners {
		if err := r.WaitConfirmed(ctx, r.Counts().Confirmed+200); err != nil {
			t.Fatalf("after the restarts: %v", err)
		}
		e.stopLoad(r)
	}
	e.copiesCaughtUp(ctx)
	rep := e.verify(ctx, queues)
	if len(rep.Lost) != 0 {
		t.Fatalf("the faults lost %d confirmed messages", len(rep.Lost))
	}
	return e
}

// Cluster case 7, the cluster soak (make cluster-soak, not in CI):
// FIBRIL_SOAK_DURATION (default 5m) of load over a durable and a
// buffered queue on three nodes, each on its own XFS image, and every 10
// to 30 s a fault chosen by the seed (FIBRIL_SEED replays a run): a
// SIGKILL, a SIGSTOP past the failover timeout and then SIGCONT, or a
// power cut of a random node, or a power cut of two nodes at once; the
// nodes come back before the next fault. With one node down at a time
// neither mode may lose anything confirmed; a two-node cut may lose a
// buffered queue's confirms that neither cut node had synced (judged
// against the frontiers recorded right before it), never a durable one. At the end the checker runs, and every follower's copy must
// reach its owner's end.
func TestClusterSoak(t *testing.T) {
	dur := soakDuration(t, "make cluster-soak", 5*time.Minute)
	ctx := caseCtx(t, dur+5*time.Minute)
	e := newClusterEnv(t, ctx, clusterFS(t))
	rng := rand.New(rand.NewPCG(e.seed, 0xc1a5))
	queues := bothModes("cs")
	r, err := StartLoad(ctx, LoadOptions{Addr: e.addrs, History: e.h, Queues: queues, Publishers: 2,
		Seed: e.seed, Prefix: "cs", Rate: 500})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	end := time.Now().Add(dur)
	faults, twoNodeCuts := 0, 0
	for time.Now().Before(end) {
		if err := pause(ctx, time.Duration(10+rng.IntN(20))*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := r.WaitConfirmed(ctx, r.Counts().Confirmed+100); err != nil {
			t.Fatalf("the cluster does not serve: %v\nschedule:\n%s", err, strings.Join(e.sched, "\n"))
		}
		i := rng.IntN(len(e.nodes))
		down := []int{i}
		switch kind := rng.IntN(4); kind {
		case 0:
			e.nodes[i].Kill()
			e.h.Fault("SIGKILL " + e.ids[i])
			e.schedule("SIGKILL %s", e.ids[i])
		case 1:
			p := e.nodes[i].Proc()
			if err := syscall.Kill(p.Pid(), syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			e.schedule("SIGSTOP %s", e.ids[i])
			if err := pause(ctx, 5*time.Second); err != nil { // past the 3 s failover timeout
				t.Fatal(err)
			}
			if err := syscall.Kill(p.Pid(), syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			e.schedule("SIGCONT %s", e.ids[i])
		case 2:
			e.powerCut(ctx, i)
			e.schedule("power cut %s", e.ids[i])
		case 3:
			j := (i + 1 + rng.IntN(len(e.nodes)-1)) % len(e.nodes)
			down = append(down, j)
			e.cutTogether(ctx, queues, i, j)
			twoNodeCuts++
		}
		faults++
		for _, i := range down {
			p := e.nodes[i].Proc()
			if p == nil {
				continue
			}
			select {
			case <-p.Exited():
				e.h.Restart()
				if err := e.nodes[i].Start(ctx); err != nil {
					t.Fatalf("restart %s: %v", e.ids[i], err)
				}
				e.schedule("%s restarted", e.ids[i])
			default: // SIGCONT: it runs on
			}
		}
	}
	if err := r.WaitConfirmed(ctx, r.Counts().Confirmed+200); err != nil {
		t.Fatalf("after the last fault: %v", err)
	}
	e.stopLoad(r)
	e.copiesCaughtUp(ctx)
	rep := e.verify(ctx, queues) // fails on any loss the faults do not allow
	if twoNodeCuts > 0 {
		logLosses(t, rep, queues)
	} else if len(rep.Lost) != 0 {
		t.Fatalf("%d faults lost %d confirmed messages", faults, len(rep.Lost))
	}
	e.copiesIdentical(queues)
}

// cutTogether cuts the power of nodes i and j at once. A buffered queue
// whose owner and one follower both lose power may lose what the two
// had written and neither synced (its third copy need not have been in
// the written set), so each queue's frontiers are recorded on its owner
// first: the checker allows a buffered loss past them, and no durable
// loss at all.
func (e *clusterEnv) cutTogether(ctx context.Context, queues []QueueSpec, i, j int) {
	e.t.Helper()
	for _, q := range queues {
		o, _ := e.owner(ctx, q.Name, 0)
		if err := RecordFrontiers(ctx, e.h, e.nodes[o].Admin(), []QueueSpec{q}); err != nil {
			e.t.Logf("frontiers of %s on %s: %v", q.Name, e.ids[o], err)
		}
	}
	e.h.CutBegins()
	for _, n := range []int{i, j} {
		if err := e.loops[n].PowerCut(ctx); err != nil {
			e.t.Fatal(err)
		}
	}
	for _, n := range []int{i, j} {
		e.nodes[n].Kill()
	}
	e.h.Fault(fmt.Sprintf("power cut of %s and %s", e.ids[i], e.ids[j]))
	e.schedule("power cut of %s and %s at once", e.ids[i], e.ids[j])
	for _, n := range []int{i, j} {
		if err := e.loops[n].Unmount(ctx); err != nil {
			e.t.Fatal(err)
		}
		if err := e.loops[n].Mount(ctx); err != nil {
			e.t.Fatal(err)
		}
	}
}

// copiesIdentical stops every node and compares, for every partition,
// the logs the nodes hold of it (owned or followed, all under
// replicas/<queue>/<incarnation>/<partition>): the same end, and the same
// records from the highest head on.
func (e *clusterEnv) copiesIdentical(queues []QueueSpec) {
	e.t.Helper()
	for i, b := range e.nodes {
		if err := b.Stop(30 * time.Second); err != nil {
			e.t.Fatalf("stop %s: %v", e.ids[i], err)
		}
	}
	for _, q := range queues {
		for part := range max(q.Partitions, 1) {
			var logs []*wal.Log
			var names []string
			for i, b := range e.nodes {
				dirs, err := filepath.Glob(filepath.Join(b.DataDir, "replicas", q.Name, "*", fmt.Sprint(part)))
				if err != nil || len(dirs) != 1 {
					e.t.Fatalf("%s's logs of %s/%d: %v %v", e.ids[i], q.Name, part, dirs, err)
				}
				l, err := wal.Open(dirs[0], wal.Options{SegmentSize: 1 << 20}) // the nodes run with 1 MiB segments
				if err != nil {
					e.t.Fatalf("open %s: %v", dirs[0], err)
				}
				defer l.Close()
				logs, names = append(logs, l), append(names, e.ids[i])
			}
			from, end := uint64(0), logs[0].WrittenNext()
			for i, l := range logs {
				from = max(from, l.Head())
				if l.WrittenNext() != end {
					e.t.Fatalf("%s/%d ends at %d on %s, at %d on %s", q.Name, part, l.WrittenNext(), names[i], end, names[0])
				}
			}
			for next := from; next < end; {
				want, err := logs[0].ReadWritten(next, 1<<20)
				if err != nil || len(want) == 0 {
					e.t.Fatalf("read %s/%d at %d on %s: %v", q.Name, part, next, names[0], err)
				}
				for i, l := range logs[1:] {
					have, err := l.ReadWritten(next, 1<<20)
					if err != nil || len(have) < len(want) {
						have, err = l.ReadWritten(next, 4<<20)
					}
					if err != nil || len(have) < len(want) {
						e.t.Fatalf("read %s/%d at %d on %s: %d records, %v", q.Name, part, next, names[i+1], len(have), err)
					}
					for j := range want {
						if have[j].Offset != want[j].Offset || have[j].Type != want[j].Type || !bytes.Equal(have[j].Payload, want[j].Payload) {
							e.t.Fatalf("%s/%d offset %d differs between %s and %s", q.Name, part, want[j].Offset, names[0], names[i+1])
						}
					}
				}
				next = want[len(want)-1].Offset + 1
			}
			e.schedule("%s/%d: identical on every node from %d to %d", q.Name, part, from, end)
		}
	}
}

// copiesCaughtUp waits until, on every queue's owner, each follower
// reports the owner's written end.
func (e *clusterEnv) copiesCaughtUp(ctx context.Context) {
	e.t.Helper()
	type progress struct {
		WrittenNext uint64 `json:"written_next"`
	}
	type view struct {
		Queues []struct {
			Name       string `json:"name"`
			Partitions []struct {
				Owner     string              `json:"owner"`
				Followers []string            `json:"followers"`
				Log       *progress           `json:"log"`
				Progress  map[string]progress `json:"progress"`
			} `json:"partitions"`
		} `json:"queues"`
	}
	for {
		behind := ""
		for _, b := range e.nodes {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.Admin()+"/api/cluster", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				behind = err.Error()
				continue
			}
			var v view
			err = json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if err != nil {
				behind = err.Error()
				continue
			}
			for _, q := range v.Queues {
				for pi, p := range q.Partitions {
					if p.Log == nil {
						continue // not the owner's view
					}
					for _, f := range p.Followers {
						if got := p.Progress[f].WrittenNext; got != p.Log.WrittenNext {
							behind = fmt.Sprintf("%s/%d: %s at %d, owner %s at %d", q.Name, pi, f, got, p.Owner, p.Log.WrittenNext)
						}
					}
				}
			}
		}
		if behind == "" {
			return
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("copies not caught up: %s", behind)
		case <-time.After(100 * time.Millisecond): // polling other processes' admin APIs
		}
	}
}
