package federation

// The in-process cluster every data-plane test of this package runs on:
// nodes that open, close and restart in place, probes on each node's
// replica FS (hold syncs, record removals), and the declare, publish and
// copy-comparison steps the tests share.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/appliance/server"
	"github.com/fibril-edge/fibril/federation/control"
	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/internal/loopback"
	"github.com/fibril-edge/fibril/internal/syncprobe"
	"github.com/fibril-edge/fibril/internal/waltest"
	"github.com/fibril-edge/fibril/wal"
)

// removals records every recursive removal on a node's replica FS.
type removals struct {
	mu    sync.Mutex
	paths []string
	walks atomic.Int64 // lists of the store of copies' own directory: walks of every copy
	// inUse, when set, says whether a path is still in use (a log the
	// broker has open); removals of such paths are kept in early.
	inUse func(path string) bool
	early []string
}

// watchInUse sets inUse.
func (r *removals) watchInUse(inUse func(path string) bool) {
	r.mu.Lock()
	r.inUse = inUse
	r.mu.Unlock()
}

// removedEarly lists the removals of paths still in use.
func (r *removals) removedEarly() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.early)
}

func (r *removals) record(op errorfs.Op) error {
	if op.Kind == errorfs.OpList && op.Path == "replicas" {
		r.walks.Add(1)
	}
	if op.Kind == errorfs.OpRemoveAll {
		r.mu.Lock()
		r.paths = append(r.paths, op.Path)
		if r.inUse != nil && r.inUse(op.Path) {
			r.early = append(r.early, op.Path)
		}
		r.mu.Unlock()
	}
	return nil
}

// under lists the removals of paths below dir.
func (r *removals) under(dir string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, p := range r.paths {
		if strings.HasPrefix(p, dir) {
			out = append(out, p)
		}
	}
	return out
}

// nodeOptions say what a test node runs beside its cluster and broker.
type nodeOptions struct {
	// clients serves the client protocol (server.New with the cluster as
	// its Cluster) on a loopback listener that the node keeps across
	// restarts, and advertises it as the node's client address. Default:
	// no client server and no client address.
	clients bool
	// followerHold is ClusterOptions.FollowerHold; default its default.
	followerHold time.Duration
}

// clusterNode is one node of an in-process cluster. Everything it stands
// on is kept across restart: the raft directory, the cluster and client
// addresses, and the in-memory FS for its queues and copies. The copies
// see that FS through two layers: syncs, which holds every file sync
// while shut, and removed, which records recursive removals.
type clusterNode struct {
	id          string
	raftDir     string
	clusterAddr string
	clientAddr  string // "" without a client server
	peers       []Peer
	bootstrap   bool
	hold        time.Duration // nodeOptions.followerHold
	fs          *vfs.MemFS
	replicaFS   vfs.FS
	syncs       *syncprobe.Probe
	removed     *removals
	fault       fault      // the broker's storage failures
	copyFault   writeFault // the copies' failing writes
	copySync    fault      // the copies' failing syncs
	// brokerLate opens the broker only once the cluster has replayed its
	// control state (a slow broker start): the cluster's recoveries may
	// then run before it is bound. Needs a quorum of the others.
	brokerLate bool

	// Set while open.
	cluster  *Cluster
	broker   *appliance.Broker
	srv      *server.Server
	clientLn net.Listener
}

// newNode reserves a node's addresses; open starts it on them.
func newNode(t *testing.T, id string, o nodeOptions) (n *clusterNode, ln, clientLn net.Listener) {
	t.Helper()
	ln = listenLoopback(t)
	n = &clusterNode{id: id, raftDir: t.TempDir(), clusterAddr: ln.Addr().String(), hold: o.followerHold}
	n.useFS(vfs.NewCrashableMem())
	if o.clients {
		clientLn = listenLoopback(t)
		n.clientAddr = clientLn.Addr().String()
	}
	return n, ln, clientLn
}

// fault fails the next sync of a file under a directory, once (Arm): a
// storage failure that latches the log (the broker's, or a copy's).
type fault struct {
	mu  sync.Mutex
	dir string // "" while disarmed
	hit chan struct{}
}

// Arm makes the next sync under dir fail; hit closes when it did.
func (f *fault) Arm(dir string) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dir, f.hit = dir, make(chan struct{})
	return f.hit
}

var errInjectedSync = errors.New("injected fsync failure")

func (f *fault) inject(op errorfs.Op) error {
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
	default:
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dir == "" || !strings.HasPrefix(op.Path, f.dir) {
		return nil
	}
	f.dir = ""
	close(f.hit)
	return errInjectedSync
}

// writeFault fails every write to a file under a directory of the
// node's copies while armed: a copy whose disk refuses writes latches.
type writeFault struct {
	mu  sync.Mutex
	dir string
}

func (f *writeFault) Arm(dir string) { f.mu.Lock(); f.dir = dir; f.mu.Unlock() }
func (f *writeFault) Disarm()        { f.Arm("") }

func (f *writeFault) inject(op errorfs.Op) error {
	switch op.Kind {
	case errorfs.OpFileWrite, errorfs.OpFileWriteAt:
	default:
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dir == "" || !strings.HasPrefix(op.Path, f.dir) {
		return nil
	}
	return errInjectedWrite
}

var errInjectedWrite = errors.New("injected write failure")

// useFS puts the node's queues and copies on fs, the copies through the
// sync probe and the removal recorder.
func (n *clusterNode) useFS(fs *vfs.MemFS) {
	n.fs, n.removed = fs, &removals{}
	var gated vfs.FS
	n.syncs, gated = syncprobe.New(fs, func(string) bool { return true })
	n.replicaFS = errorfs.Wrap(errorfs.Wrap(gated, errorfs.InjectorFunc(n.removed.record)),
		errorfs.Any(errorfs.InjectorFunc(n.copyFault.inject), errorfs.InjectorFunc(n.copySync.inject)))
}

// powerCut cuts the node's power: what its queues and copies had not
// synced is lost, and it starts again on what was. (Its raft directory
// is on the real disk, where raft syncs every write.)
func (n *clusterNode) powerCut(t *testing.T) {
	t.Helper()
	survived := n.fs.CrashClone(vfs.CrashCloneCfg{})
	n.close() // what closing writes goes to the old file system, which is gone
	n.useFS(survived)
	n.restart(t)
}

// powerCutAll cuts the power of the nodes named, all at once: each loses
// what its queues and copies had not synced at that one moment, and they
// start again on what was.
func (c testCluster) powerCutAll(t *testing.T, ids ...string) {
	t.Helper()
	survived := make([]*vfs.MemFS, len(ids))
	for i, id := range ids {
		survived[i] = c[id].fs.CrashClone(vfs.CrashCloneCfg{})
	}
	for _, id := range ids {
		c[id].close() // what closing writes goes to the old file systems, which are gone
	}
	for i, id := range ids {
		c[id].useFS(survived[i])
		c[id].restart(t)
	}
}

// open starts the node's cluster, broker and (with a client address) its
// client server on the given listeners.
func (n *clusterNode) open(t *testing.T, ln, clientLn net.Listener) {
	t.Helper()
	n.clientLn = clientLn // closed with the node from here on
	quiet := slog.New(slog.DiscardHandler)
	if os.Getenv("FIBRIL_TEST_LOG") != "" {
		quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	c, err := OpenCluster(ClusterOptions{
		Node: Options{ID: n.id, Dir: n.raftDir, Listener: ln, Listen: n.clusterAddr, Peers: n.peers,
			ClientAddr: n.clientAddr, Bootstrap: n.bootstrap, ElectionTimeout: testElection, Logger: quiet},
		ReplicaDir: "replicas", ReplicaFS: n.replicaFS, ReplicaSegmentSize: 1 << 20,
		FailoverTimeout: testFailover, FollowerHold: n.hold,
	})
	if err != nil {
		t.Fatalf("open %s: %v", n.id, err)
	}
	n.cluster = c
	if n.brokerLate {
		select {
		case <-c.node.Replayed():
		case <-time.After(time.Minute):
			t.Fatalf("%s's control state did not replay", n.id)
		}
	}
	brokerFS := errorfs.Wrap(n.fs, errorfs.InjectorFunc(n.fault.inject))
	b, err := appliance.Open(appliance.Options{DataDir: "data", FS: brokerFS, Logger: quiet, SegmentSize: 1 << 20,
		MinFreeBytes: -1, Replication: c, LogDir: c.LogDir})
	if err != nil {
		t.Fatalf("open %s's broker: %v", n.id, err)
	}
	n.broker = b
	c.Bind(b)
	if clientLn == nil {
		return
	}
	srv, err := server.New(b, server.Options{Logger: quiet, Cluster: c})
	if err != nil {
		t.Fatalf("%s's client server: %v", n.id, err)
	}
	n.srv = srv
	go srv.Serve(clientLn)
}

// close stops what is open, the client server first, then the broker,
// then the cluster. A closed node stays closed.
func (n *clusterNode) close() {
	for _, step := range closeSteps {
		step(n)
	}
}

// closeSteps close a node in order; a cluster's cleanup takes each step
// on every node before the next.
var closeSteps = []func(*clusterNode){(*clusterNode).closeServer, (*clusterNode).closeBroker, (*clusterNode).closeCluster}

func (n *clusterNode) closeServer() {
	if n.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		n.srv.Shutdown(ctx)
		cancel()
		n.srv = nil
	}
	if n.clientLn != nil {
		n.clientLn.Close() // Serve may not have taken it yet
		n.clientLn = nil
	}
}

func (n *clusterNode) closeBroker() {
	if n.broker != nil {
		n.broker.Close()
		n.broker = nil
	}
}

func (n *clusterNode) closeCluster() {
	if n.cluster != nil {
		n.cluster.Close()
		n.cluster = nil
	}
}

// listenLoopback listens on a loopback port outside the kernel's
// ephemeral range, so that no connection the test makes can take the
// port while its node is down between a close and a restart.
func listenLoopback(t testing.TB) net.Listener {
	t.Helper()
	lns, err := loopback.Listeners(1)
	if err != nil {
		t.Fatal(err)
	}
	return lns[0]
}

// restart closes the node and opens it again where it was.
func (n *clusterNode) restart(t *testing.T) {
	t.Helper()
	n.close()
	ln, err := net.Listen("tcp", n.clusterAddr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", n.clusterAddr, err)
	}
	var clientLn net.Listener
	if n.clientAddr != "" {
		if clientLn, err = net.Listen("tcp", n.clientAddr); err != nil {
			ln.Close()
			t.Fatalf("listen again on %s: %v", n.clientAddr, err)
		}
	}
	n.open(t, ln, clientLn)
}

// testCluster is an in-process cluster's nodes by id.
type testCluster map[string]*clusterNode

// newTestCluster returns an empty cluster that the test's cleanup closes,
// with every node in it by then. First every node's syncs are let
// through; then every node's client server stops, then every broker
// closes, and only then every cluster: an owner's broker closes while its
// followers still take its stream, so the appends waiting at its gates
// complete (a broker whose appends wait at a gate that cannot open does
// not finish closing: a blocked submit holds the lock its close needs).
func newTestCluster(t *testing.T) testCluster {
	c := testCluster{}
	t.Cleanup(func() {
		for _, n := range c {
			n.syncs.Open()
		}
		for _, step := range closeSteps {
			for _, n := range c {
				step(n)
			}
		}
	})
	return c
}

// startNodes runs n nodes, n1 to nN, all bootstrapping with each other as
// peers, and waits until each sees all n members.
func startNodes(t *testing.T, n int, o nodeOptions) testCluster {
	t.Helper()
	c := newTestCluster(t)
	var ids []string
	lns, clientLns := map[string]net.Listener{}, map[string]net.Listener{}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("n%d", i)
		ids = append(ids, id)
		c[id], lns[id], clientLns[id] = newNode(t, id, o)
		c[id].bootstrap = true
	}
	for _, nd := range c {
		for _, id := range ids {
			if id != nd.id {
				nd.peers = append(nd.peers, Peer{ID: id, Addr: c[id].clusterAddr})
			}
		}
	}
	for _, id := range ids {
		c[id].open(t, lns[id], clientLns[id])
	}
	c.waitMembers(t, n)
	return c
}

// startLone runs one node that forms a cluster alone, and waits until it
// lists itself.
func startLone(t *testing.T, id string, o nodeOptions) testCluster {
	t.Helper()
	c := newTestCluster(t)
	nd, ln, clientLn := newNode(t, id, o)
	nd.bootstrap = true
	c[id] = nd
	nd.open(t, ln, clientLn)
	c.waitMembers(t, 1)
	return c
}

// join starts a node that joins the cluster through member via.
func (c testCluster) join(t *testing.T, id, via string, o nodeOptions) *clusterNode {
	t.Helper()
	nd, ln, clientLn := newNode(t, id, o)
	nd.peers = []Peer{{ID: via, Addr: c[via].clusterAddr}}
	c[id] = nd
	nd.open(t, ln, clientLn)
	return nd
}

// waitMembers waits until every node lists n members.
func (c testCluster) waitMembers(t *testing.T, n int) {
	t.Helper()
	for id, nd := range c {
		await.Within(t, 30*time.Second, fmt.Sprintf("%s to see %d members", id, n), func() bool {
			return len(nd.cluster.Node().State().Members) == n
		})
	}
}

// declare declares cfg with policy through node via and returns the
// queue's owner once it has a gate for every partition.
func (c testCluster) declare(t *testing.T, via string, cfg appliance.QueueConfig, policy string) *clusterNode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := c[via].cluster.DeclarePolicy(ctx, cfg, policy); err != nil {
		t.Fatalf("declare %s through %s: %v", cfg.Name, via, err)
	}
	owner := c[c[via].cluster.Node().State().Assignments[cfg.Name][0].Owner]
	await.Within(t, 30*time.Second, owner.id+" to serve "+cfg.Name, func() bool {
		for part := range cfg.WithDefaults().Partitions {
			if _, ok := owner.cluster.Gate(cfg.Name, part); !ok {
				return false
			}
		}
		return true
	})
	return owner
}

// publishN publishes n messages with bodies prefix-i (keys i mod 8) and
// waits for every confirm.
func publishN(t *testing.T, b *appliance.Broker, queue, prefix string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		b.PublishAsync(queue, appliance.Message{Key: fmt.Sprint(i % 8), Body: []byte(fmt.Sprintf("%s-%d", prefix, i))},
			func(_ appliance.Confirm, err error) {
				if err != nil {
					errs <- err
				}
				wg.Done()
			})
	}
	confirmed := make(chan struct{})
	go func() {
		wg.Wait()
		close(confirmed)
	}()
	select {
	case <-confirmed:
	case <-time.After(2 * time.Minute):
		t.Fatalf("publish to %s: not every confirm within 2 minutes", queue)
	}
	close(errs)
	for err := range errs {
		t.Fatalf("publish to %s: %v", queue, err)
	}
}

// confirmOnRelease checks that the durable publish confirming on
// confirmed is not confirmed while the held nodes' syncs are shut, opens
// their syncs, and waits for the confirm, which must carry no error.
func confirmOnRelease(t *testing.T, ctx context.Context, confirmed <-chan error, held ...*clusterNode) {
	t.Helper()
	var ids []string
	for _, n := range held {
		ids = append(ids, n.id)
	}
	select {
	case err := <-confirmed:
		t.Fatalf("durable publish confirmed with the syncs of %v held (err %v)", ids, err)
	default:
	}
	for _, n := range held {
		n.syncs.Open()
	}
	select {
	case err := <-confirmed:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("durable publish not confirmed after the syncs were released")
	}
}

// frontier is the end of a copy that must reach the owner's log end:
// (*wal.Log).WrittenNext or (*wal.Log).DurableNext.
type frontier func(*wal.Log) uint64

// copiesMatch is partitionCopies for every partition of queue, in
// partition order, and returns all the copies' records.
func (c testCluster) copiesMatch(t *testing.T, queue string, reach frontier) [][]wal.Record {
	t.Helper()
	var all [][]wal.Record
	for _, a := range c.assignments(t, queue) {
		_, copies := c.partitionCopies(t, queue, a, reach)
		all = append(all, copies...)
	}
	return all
}

// partitionCopies waits until each follower's copy of a's partition
// reaches the owner's log end (as it is on entry) at the reach frontier,
// checks the copy does not run beyond the owner's log, and compares them
// record for record (offset, type, payload). It returns the owner's end
// and each follower's records, in a.Followers order.
func (c testCluster) partitionCopies(t *testing.T, queue string, a control.Assignment, reach frontier) (uint64, [][]wal.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ol, ok := c[a.Owner].cluster.OwnerLog(queue, a.Partition)
	if !ok {
		t.Fatalf("%s does not serve %s/%d", a.Owner, queue, a.Partition)
	}
	end := ol.WrittenNext()
	want := waltest.Records(t, ol, end)
	var copies [][]wal.Record
	for _, f := range a.Followers {
		var fl *wal.Log
		await.Until(t, ctx, fmt.Sprintf("%s's copy of %s/%d to reach %d", f, queue, a.Partition, end), func() bool {
			l, ok := c[f].cluster.Follower().Log(queue, a.Partition)
			fl = l
			return ok && reach(l) >= end
		})
		// The copy first, then the owner: a copy never holds what its
		// owner has not written.
		if copyEnd, ownerEnd := fl.WrittenNext(), ol.WrittenNext(); copyEnd > ownerEnd {
			t.Fatalf("%s's copy of %s/%d ends at %d, beyond the owner's log at %d", f, queue, a.Partition, copyEnd, ownerEnd)
		}
		have := waltest.Records(t, fl, end)
		for i := range want {
			if want[i].Offset != have[i].Offset || want[i].Type != have[i].Type || !bytes.Equal(want[i].Payload, have[i].Payload) {
				t.Fatalf("%s/%d record %d differs on %s", queue, a.Partition, i, f)
			}
		}
		copies = append(copies, have)
	}
	return end, copies
}

// assignments is queue's assignments as the node whose state is newest
// sees them (a node just restarted may not have caught up).
func (c testCluster) assignments(t *testing.T, queue string) []control.Assignment {
	t.Helper()
	var newest *control.State
	for _, id := range slices.Sorted(maps.Keys(c)) {
		if nd := c[id]; nd.cluster != nil {
			if st := nd.cluster.Node().State(); len(st.Assignments[queue]) > 0 && (newest == nil || st.Applied > newest.Applied) {
				newest = st
			}
		}
	}
	if newest == nil {
		t.Fatalf("no node lists assignments for %s", queue)
	}
	return newest.Assignments[queue]
}

// other is a node that is not n, the first by id.
func (c testCluster) other(n *clusterNode) *clusterNode {
	for _, id := range slices.Sorted(maps.Keys(c)) {
		if c[id] != n {
			return c[id]
		}
	}
	return nil
}

// dial connects a client to n's client listener (nodeOptions.clients),
// closed at the end of the test.
func (n *clusterNode) dial(t *testing.T, ctx context.Context) *client.Client {
	t.Helper()
	cl, err := client.Dial(ctx, n.clientAddr, client.Options{})
	if err != nil {
		t.Fatalf("dial %s: %v", n.id, err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}
