package federation

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/federation/control"
	"github.com/fibril-edge/fibril/federation/replication"
	"github.com/fibril-edge/fibril/wal"
)

// ClusterOptions configure a Cluster: the control-plane node and this
// node's store of copies.
type ClusterOptions struct {
	Node Options
	// ReplicaDir holds this node's copies of partitions other nodes own.
	// Required.
	ReplicaDir string
	// ReplicaFS is the copies' file system; default vfs.Default.
	ReplicaFS vfs.FS
	// ReplicaSegmentSize of the copies' logs; default the log's default.
	ReplicaSegmentSize int64
	// ReplicaSyncGroup, if set, is the node's group in which the logs
	// that sync at the same moment share one sync of their file system
	// (wal.SyncGroup); default nil.
	ReplicaSyncGroup *wal.SyncGroup
	// Forward are the client options this node uses to reach other
	// nodes' client listeners when it forwards a publish (token, TLS).
	Forward client.Options
	// ForwardNamed makes a forwarding connection also check that the
	// owner's client listener presents a certificate naming the owner (its
	// common name is the node ID), as the cluster port's do: for a
	// Forward.TLS that verifies against the cluster CA, where any node's
	// certificate would otherwise do. Default false.
	ForwardNamed bool
	// FailoverTimeout is how long a queue's owner may stay unreachable
	// from the leader before the queue fails over; default
	// DefaultFailoverTimeout.
	FailoverTimeout time.Duration
	// FollowerHold is how long an owner's retention keeps records for a
	// follower it has not heard from (its node down): past it retention
	// passes the follower's copy, which is rebuilt from the owner's head
	// when the follower returns. Default DefaultFollowerHold.
	FollowerHold time.Duration
}

// DefaultFollowerHold is ClusterOptions.FollowerHold's default: a node
// down for a restart or an upgrade resumes its copies where they ended;
// one down longer costs its owners no more disk than its absence for an
// hour did.
const DefaultFollowerHold = time.Hour

// Cluster ties a node's control plane, its local broker and replication
// together. It is the broker's appliance.Replication: every partition this
// node owns gets a gate fed by one stream per follower (followers its
// assignment gains later, as members join, get theirs then), and every
// queue placed on this node is declared in the local broker.
type Cluster struct {
	node     *Node
	follower *replication.Follower
	log      *slog.Logger

	mu     sync.Mutex // guards owned, broker and logsOpened
	owned  map[string]*ownedPartition
	broker *appliance.Broker
	// logsOpened are the owned partitions' logs opened since collectCopies
	// last looked.
	logsOpened []replication.CopyID

	serveMu  sync.Mutex        // one local declare or delete at a time; guards declared
	declared map[string]uint64 // queues the local broker serves, by incarnation
	// declaredMu, a leaf lock, is held with serveMu to change declared
	// (setDeclaredLocked, undeclareLocked) and alone to read it from
	// outside a declare or delete (brokerServes): a collection must not
	// wait for one.
	declaredMu sync.Mutex
	// unserved are the queues the broker stopped serving since
	// collectCopies last looked (guarded by declaredMu), and collectKick
	// wakes it for them: the logs the broker kept open are its to remove
	// once the state no longer assigns them.
	unserved    []string
	collectKick chan struct{}
	// openLogs are the copies whose logs the broker holds open as their
	// owner, served or not yet (guarded by declaredMu): a log the broker
	// opened at start is in use before it is served. Attach adds one; it
	// goes once the broker's delete or close of the queue has returned
	// (undeclareLocked), so not while the log is still closing.
	openLogs map[replication.CopyID]bool
	// servedAt is the newest state (its Applied index) serve or unserve
	// acted on: an older one, read before another caller acted, is
	// ignored rather than allowed to undo what a newer one did.
	servedAt uint64

	nodeSet chan struct{} // closed once node is set: the follower's hooks wait for it
	bound   chan struct{} // closed by Bind: recoverQueues starts then

	replicaDir string // this node's copies, and the histories of what it owns
	replicaFS  vfs.FS

	forwardOpts client.Options
	fwdMu       sync.Mutex                 // guards forward and forwarders
	forward     map[string]*client.Client  // by owner's node ID and client address (forwardKey)
	fwdNamed    bool                       // ClusterOptions.ForwardNamed
	forwarders  map[string]*queueForwarder // by queue

	proxyMu sync.Mutex                  // guards proxies
	proxies map[*proxyConsumer]struct{} // subscriptions this node consumes on an owner (consume.go)

	localMu sync.Mutex            // guards local
	local   map[string]LocalQueue // queues kept out of the cluster (local.go)

	modeMu   sync.Mutex      // guards modeRuns
	modeRuns map[string]bool // queues whose mode change runs (mode.go)
	modeKick chan struct{}   // wakes watchModes

	fo              *failover // recoveries (failover.go)
	failoverTimeout time.Duration
	followerHold    time.Duration // ClusterOptions.FollowerHold

	stop chan struct{}
	wg   sync.WaitGroup
}

var _ appliance.Replication = (*Cluster)(nil)

// OpenCluster opens the node and the store of copies.
func OpenCluster(o ClusterOptions) (*Cluster, error) {
	if o.ReplicaDir == "" {
		return nil, errors.New("federation: ReplicaDir is required")
	}
	logger := o.Node.Logger
	if logger == nil {
		logger = slog.Default()
	}
	c := &Cluster{log: logger.With("node", o.Node.ID), owned: map[string]*ownedPartition{},
		declared: map[string]uint64{}, openLogs: map[replication.CopyID]bool{}, nodeSet: make(chan struct{}), bound: make(chan struct{}), stop: make(chan struct{}),
		forwardOpts: o.Forward, fwdNamed: o.ForwardNamed, forward: map[string]*client.Client{}, forwarders: map[string]*queueForwarder{}, proxies: map[*proxyConsumer]struct{}{}, local: map[string]LocalQueue{}, modeRuns: map[string]bool{}, modeKick: make(chan struct{}, 1), collectKick: make(chan struct{}, 1), replicaDir: o.ReplicaDir, replicaFS: o.ReplicaFS,
		fo: newFailover(), failoverTimeout: o.FailoverTimeout, followerHold: o.FollowerHold}
	if c.failoverTimeout <= 0 {
		c.failoverTimeout = DefaultFailoverTimeout
	}
	if c.followerHold <= 0 {
		c.followerHold = DefaultFollowerHold
	}
	if c.replicaFS == nil {
		c.replicaFS = vfs.Default
	}
	c.follower = replication.NewFollower(replication.FollowerOptions{Dir: o.ReplicaDir, FS: o.ReplicaFS,
		SegmentSize: o.ReplicaSegmentSize, SyncGroup: o.ReplicaSyncGroup, Logger: c.log, Accept: c.accept, Keep: c.keeps, InUse: c.brokerServes, PeerID: PeerNodeID})
	o.Node.Replica = c.follower.Serve
	n, err := Open(o.Node)
	if err != nil {
		c.follower.Close()
		return nil, err
	}
	c.node = n
	close(c.nodeSet)
	c.wg.Add(5)
	go c.followAssignments()
	go c.collectCopies()
	go c.recoverQueues()
	go c.watchOwners()
	go c.watchModes()
	return c, nil
}

// LogDir is the broker's appliance.Options.LogDir for this node: a log it
// owns lives where its copy of the partition would (failover.go); a
// queue kept local stays where the solo node kept it (local.go).
func (c *Cluster) LogDir(queue string, partition int) string {
	if dir, ok := c.localDir(queue, partition); ok {
		return dir
	}
	id := c.logCopy(queue, partition)
	if !c.isBound() {
		// The broker's start reopens the logs it wrote, under the
		// declarations its own metadata holds. When the state names a
		// declaration this node has no directory of (the queue was
		// deleted and declared again while it was down), the newest it
		// has is the broker's: opened as it is, it is closed as another
		// declaration's (closeStaleOpened), rather than an empty log of
		// the new declaration opened under the old one's settings.
		if _, err := c.replicaFS.Stat(c.copyDir(id)); err != nil {
			if newest := c.follower.NewestIncarnation(queue, partition); newest != 0 {
				id.Incarnation = newest
			}
		}
	}
	return c.copyDir(id)
}

// Node is the control-plane node.
func (c *Cluster) Node() *Node { return c.node }

// Follower is this node's store of copies.
func (c *Cluster) Follower() *replication.Follower { return c.follower }

// Bind starts serving the queues placed on this node through b, whose
// Options.Replication must be c.
func (c *Cluster) Bind(b *appliance.Broker) {
	c.mu.Lock()
	c.broker = b
	c.mu.Unlock()
	close(c.bound)
	c.SettingsChanged(b.Settings())
	c.wg.Add(2)
	go c.syncQueues()
	go c.adoptPending()
}

var _ appliance.SettingsObserver = (*Cluster)(nil)

// SettingsChanged applies the broker's runtime settings to this node's
// copies: they sync in the background at the broker's interval.
func (c *Cluster) SettingsChanged(s appliance.Settings) {
	if err := c.follower.SetBackgroundSyncInterval(s.BackgroundSyncInterval()); err != nil {
		c.log.Error("background sync interval not applied to every copy", "err", err)
	}
}

// syncQueues declares in the local broker every queue this node owns,
// and deletes from it those it served that the state no longer has (the
// queue was deleted, or deleted and declared again), at start and after
// every applied command.
func (c *Cluster) syncQueues() {
	defer c.wg.Done()
	for {
		changed := c.node.Changed()
		st := c.node.shared()
		c.serveMu.Lock()
		var gone []string
		for name, inc := range c.declared {
			if q, ok := st.Queues[name]; !ok || q.Incarnation != inc {
				gone = append(gone, name)
			}
		}
		c.serveMu.Unlock()
		for _, name := range gone {
			if err := c.unserve(st, name); err != nil {
				c.log.Error("cannot delete a queue the cluster no longer has", "queue", name, "err", err)
			}
		}
		c.closeStaleOpened()
		// Dead-letter queues first: a queue may reject a message at once.
		isDeadLetter := st.DeadLetterQueues()
		for _, deadLetters := range []bool{true, false} {
			for name := range st.Queues {
				if isDeadLetter[name] != deadLetters {
					continue
				}
				if err := c.serve(st, name); err != nil {
					c.log.Error("cannot open a queue placed on this node", "queue", name, "err", err)
				}
			}
		}
		select {
		case <-changed:
		case <-c.stop:
			return
		}
	}
}

// serve declares queue in the local broker when st places it on this
// node and it is not served yet; a queue served under an older
// incarnation is deleted from the broker first. serveMu makes the sync
// loop and a declaring or deleting client take turns.
func (c *Cluster) serve(st *control.State, name string) error {
	if lq, ok := c.localQueue(name); ok {
		if lq.Joining {
			return nil // adoptPending serves it, once handed over
		}
		return fmt.Errorf("%w: the cluster placed queue %s on this node, which keeps a local queue of that name; delete the local one to serve the cluster's",
			appliance.ErrConflict, name)
	}
	c.serveMu.Lock()
	defer c.serveMu.Unlock()
	return c.serveLocked(st, name)
}

// serveLocked is serve with serveMu held.
func (c *Cluster) serveLocked(st *control.State, name string) error {
	q, ok := st.Queues[name]
	as := st.Assignments[name]
	if !ok || len(as) == 0 || as[0].Owner != c.node.opts.ID {
		return nil
	}
	b := c.boundBroker()
	inc, served := c.declared[name]
	if b == nil || (served && inc == q.Incarnation) || !c.newStateLocked(st) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if opened, ok := c.openedIncarnation(name); ok && !served && opened != q.Incarnation {
		// The broker opened at start the log of another declaration
		// under this name (deleted and declared again while this node
		// was down): none of it is this queue's. A state that has not
		// caught up may name an older one than the broker's: nothing is
		// done on it.
		if !c.stateCaughtUp(st) {
			return nil
		}
		c.log.Warn("the broker opened another declaration of the queue; closing it", "queue", name,
			"opened", opened, "incarnation", q.Incarnation)
		if err := c.deleteLocalLocked(ctx, b, name); err != nil {
			return err
		}
	}
	if !c.mayServe(st, name) {
		// A queue the broker opened at start (its log reopened: a new
		// instance, which goes through recovery first) is served as it
		// is; nothing else is opened here.
		if _, err := b.QueueInfo(name); err == nil && !served {
			c.setDeclaredLocked(name, q.Incarnation)
		}
		return nil
	}
	if served {
		if err := c.deleteLocalLocked(ctx, b, name); err != nil {
			return err
		}
	}
	if _, err := b.Declare(ctx, q.Config); err != nil {
		return err
	}
	c.setDeclaredLocked(name, q.Incarnation)
	c.fo.setServing(name, true)
	c.kickModes() // a change pending in the state is this node's to carry out now
	c.log.Info("serving queue", "queue", name, "policy", q.Policy.String(), "incarnation", q.Incarnation, "epoch", as[0].Epoch)
	return nil
}

// closeStaleOpened closes the queues the broker opened at start that are
// not this node's to serve: a declaration the state no longer has
// (deleted while this node was down, or deleted and declared again, placed
// here or elsewhere), or one another node owns now. They were never
// served (declared misses them), so unserve does not find them, serve
// only replaces one this node owns, and recoverQueues only looks at
// queues this node holds a copy of. Their logs stay for collectCopies. It acts once the state has
// replayed (a blank node's, once it has caught up to where its leader
// was), which is at least as new as the one the broker declared them
// under; serveMu keeps a declare from coming between the look and the
// close.
func (c *Cluster) closeStaleOpened() {
	if !c.caughtUp() {
		return
	}
	b := c.boundBroker()
	if b == nil || len(c.openedAtStart()) == 0 {
		return // every one served or closed: serveMu is not taken for nothing at each command
	}
	c.serveMu.Lock()
	defer c.serveMu.Unlock()
	// Looked at again under serveMu: the broker opens no cluster queue
	// meanwhile, so each one found is still the broker's queue of its
	// name when it is closed.
	st := c.node.shared()
	for _, op := range c.openedAtStart() {
		name, inc := op.queue, op.incarnation
		c.declaredMu.Lock()
		served, ok := c.declared[name]
		c.declaredMu.Unlock()
		if ok && served == inc {
			c.mu.Lock()
			op.atStart = false // served: the broker's queue is the cluster's now
			c.mu.Unlock()
			continue
		}
		if q, known := st.Queues[name]; known && q.Incarnation == inc && st.OwnedBy(name, c.node.opts.ID) {
			continue // this node's to serve, or to recover first (recoverQueues)
		}
		c.fenceQueue(name)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := b.DeleteQueue(ctx, name)
		cancel()
		if err != nil && !errors.Is(err, appliance.ErrNotFound) {
			c.log.Error("cannot close a queue opened at start that is not this node's to serve", "queue", name, "incarnation", inc, "err", err)
			continue
		}
		c.undeclareLocked(name)
		c.fo.setServing(name, false)
		c.log.Warn("closed a queue opened at start that is not this node's to serve", "queue", name, "incarnation", inc)
	}
}

// openedAtStart lists the first partitions of the queues the broker
// opened at start and closeStaleOpened has not settled yet (served or
// closed; a closed one is detached).
func (c *Cluster) openedAtStart() []*ownedPartition {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ops []*ownedPartition
	for _, op := range c.owned {
		if op.partition == 0 && op.atStart {
			ops = append(ops, op)
		}
	}
	return ops
}

// caughtUp reports whether the node's state is one to act on: replayed,
// and for a node that opened with no raft state (blank), caught up to
// where its leader was when it asked (Node.learnLive). Before, the state
// may name declarations long gone, or lack ones this node holds.
func (c *Cluster) caughtUp() bool { return c.stateCaughtUp(c.node.shared()) }

// stateCaughtUp is caughtUp for st, a state read earlier.
func (c *Cluster) stateCaughtUp(st *control.State) bool {
	select {
	case <-c.node.Replayed():
	default:
		return false
	}
	return c.node.liveKnown() && st.Applied >= c.node.liveFrom.Load()
}

// openedIncarnation is the declaration whose log the broker holds open
// for name, as its first partition's directory names it.
func (c *Cluster) openedIncarnation(name string) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	op, ok := c.owned[ownedKey(name, 0)]
	if !ok {
		return 0, false
	}
	return op.incarnation, true
}

// unserve deletes queue from the local broker when this node serves it
// and st no longer has it under the incarnation served.
func (c *Cluster) unserve(st *control.State, name string) error {
	c.serveMu.Lock()
	defer c.serveMu.Unlock()
	inc, served := c.declared[name]
	if q, ok := st.Queues[name]; !served || (ok && q.Incarnation == inc) || !c.newStateLocked(st) {
		return nil
	}
	b := c.boundBroker()
	if b == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return c.deleteLocalLocked(ctx, b, name)
}

// deleteLocalLocked deletes a served queue from the local broker, its
// logs included. serveMu is held.
func (c *Cluster) deleteLocalLocked(ctx context.Context, b *appliance.Broker, name string) error {
	if err := b.DeleteQueue(ctx, name); err != nil && !errors.Is(err, appliance.ErrNotFound) {
		return fmt.Errorf("delete queue %s from the local broker: %w", name, err)
	}
	c.log.Info("stopped serving queue: the cluster deleted it", "queue", name, "incarnation", c.declared[name])
	c.undeclareLocked(name)
	c.fo.setServing(name, false)
	return nil
}

// setDeclaredLocked records that the local broker serves name at
// incarnation inc. serveMu is held.
func (c *Cluster) setDeclaredLocked(name string, inc uint64) {
	c.declaredMu.Lock()
	c.declared[name] = inc
	c.declaredMu.Unlock()
}

// undeclareLocked records that the local broker no longer serves name,
// its logs closed, and wakes collectCopies to remove them if the state
// no longer assigns them. serveMu is held.
func (c *Cluster) undeclareLocked(name string) {
	c.declaredMu.Lock()
	delete(c.declared, name)
	for id := range c.openLogs {
		if id.Queue == name {
			delete(c.openLogs, id) // the broker closed it
		}
	}
	c.unserved = append(c.unserved, name)
	c.declaredMu.Unlock()
	select {
	case c.collectKick <- struct{}{}:
	default:
	}
}

// takeUnserved returns the queues the broker stopped serving since the
// last call.
func (c *Cluster) takeUnserved() []string {
	c.declaredMu.Lock()
	defer c.declaredMu.Unlock()
	names := c.unserved
	c.unserved = nil
	return names
}

// brokerServes says whether the local broker serves the queue of copy
// id, at id's incarnation: the copy is the broker's open log.
func (c *Cluster) brokerServes(id replication.CopyID) bool {
	c.declaredMu.Lock()
	defer c.declaredMu.Unlock()
	inc, ok := c.declared[id.Queue]
	return (ok && inc == id.Incarnation) || c.openLogs[id]
}

// newStateLocked reports whether st is at least as new as every state
// serve and unserve acted on, and records it. serveMu is held.
func (c *Cluster) newStateLocked(st *control.State) bool {
	if st.Applied < c.servedAt {
		return false
	}
	c.servedAt = st.Applied
	return true
}

// isBound reports whether Bind has run: a partition attached before was
// opened by the broker's start.
func (c *Cluster) isBound() bool {
	select {
	case <-c.bound:
		return true
	default:
		return false
	}
}

func (c *Cluster) boundBroker() *appliance.Broker {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.broker
}

// DeleteQueue deletes a queue cluster-wide: its declaration and
// assignments leave the control state, the owner's broker deletes it, and
// every follower removes its copies. On return this node's state no
// longer has the queue, and, when this node served it, its broker has
// deleted it; other nodes follow as they apply the change. A queue the
// cluster does not know but this node's broker has (a dead-letter queue,
// which lives on its owner only, or a queue deleted while this node was
// down) is deleted from the broker. An unknown queue is
// control.ErrUnknownQueue (appliance.ErrNotFound).
func (c *Cluster) DeleteQueue(ctx context.Context, name string) error {
	if c.isLocal(name) {
		return c.deleteLocalQueue(ctx, name)
	}
	// Read your writes: DeleteQueue returns once this node has applied
	// the delete, so its state no longer has the declaration deleted.
	if err := c.node.DeleteQueue(ctx, name); err != nil {
		if errors.Is(err, control.ErrUnknownQueue) {
			return c.deleteUnknown(ctx, name, err)
		}
		return err
	}
	return c.unserve(c.node.shared(), name)
}

// deleteUnknown deletes from the broker a queue the cluster does not know
// (DeleteQueue), or answers unknown (err). It looks again under serveMu:
// a queue declared meanwhile, or one this node serves, is the cluster's
// and stays.
func (c *Cluster) deleteUnknown(ctx context.Context, name string, unknown error) error {
	b := c.boundBroker()
	if b == nil {
		return unknown
	}
	c.serveMu.Lock()
	defer c.serveMu.Unlock()
	var known bool
	c.node.read(func(s *control.State) { _, known = s.Queues[name] })
	c.declaredMu.Lock()
	_, served := c.declared[name]
	c.declaredMu.Unlock()
	if known || served {
		return unknown
	}
	if _, err := b.QueueInfo(name); err != nil {
		return unknown
	}
	c.fenceQueue(name)
	if err := b.DeleteQueue(ctx, name); err != nil {
		return err
	}
	c.undeclareLocked(name)
	c.fo.setServing(name, false)
	return nil
}

// DeclarePolicy declares a queue cluster-wide under policy ("" = the
// default for its mode). When this node owns it, the local broker serves
// it on return.
func (c *Cluster) DeclarePolicy(ctx context.Context, cfg appliance.QueueConfig, policy string) (control.Queue, bool, error) {
	if c.isLocal(cfg.Name) {
		return c.declareLocal(ctx, cfg)
	}
	q, created, err := c.node.Declare(ctx, cfg, policy)
	if err != nil {
		return q, created, err
	}
	st := c.node.shared()
	// The dead-letter queue first: the queue may reject a message at once.
	if dl := q.Config.DeadLetter; dl != "" {
		if err := c.serve(st, dl); err != nil {
			return q, created, err
		}
	}
	return q, created, c.serve(st, cfg.Name)
}

// JoinVia asks the cluster reachable at peer's cluster port to admit
// this node.
func (c *Cluster) JoinVia(ctx context.Context, peer string) error { return c.node.JoinVia(ctx, peer) }

// Declare is DeclarePolicy with the mode's default policy, answered as
// the broker answers a declare (the server's Cluster).
func (c *Cluster) Declare(ctx context.Context, cfg appliance.QueueConfig) (appliance.DeclareResult, error) {
	q, created, err := c.DeclarePolicy(ctx, cfg, "")
	if err != nil {
		return appliance.DeclareResult{}, err
	}
	return appliance.DeclareResult{Config: q.Config, Created: created, Warning: strings.Join(q.Warnings, " ")}, nil
}

func ownedKey(queue string, partition int) string { return queue + "/" + strconv.Itoa(partition) }

// Attach gives a partition this node owns its gate and its streams, and
// registers it so that followers its assignment gains later get theirs
// (see followAssignments).
//
// A node that restarts opens its queues before raft has replayed the
// control log to it, so the assignment may not be known yet. The
// partition then waits for it: nothing is confirmed or delivered, and
// retention removes nothing, until the assignment says which copies count.
func (c *Cluster) Attach(queue string, partition int, cfg appliance.QueueConfig, log *wal.Log) appliance.ReplicaGate {
	if c.isLocal(queue) {
		return nil // replicated nowhere: it confirms as a solo node's
	}
	// The copy the log is: its directory names it. The state may have
	// moved on since the broker asked LogDir (a queue deleted and
	// declared again while this node was down keeps the old log here).
	id, ok := c.copyAt(log.Dir())
	if !ok || id.Queue != queue || id.Partition != partition {
		id = c.logCopy(queue, partition)
	}
	op := &ownedPartition{c: c, queue: queue, partition: partition, key: ownedKey(queue, partition), incarnation: id.Incarnation, atStart: !c.isBound(),
		durability: cfg.Durability, log: log, ready: make(chan struct{}), done: make(chan struct{}), fencedCh: make(chan struct{})}
	c.declaredMu.Lock()
	for open := range c.openLogs {
		if open.Queue == id.Queue && open.Partition == id.Partition {
			delete(c.openLogs, open) // closed: this one replaces it
		}
	}
	c.openLogs[id] = true
	c.declaredMu.Unlock()
	op.history, op.dir = c.beginInstance(id, log)
	c.mu.Lock()
	c.owned[op.key] = op
	c.mu.Unlock()
	// Registered first, then synced: a change applied in between is seen
	// here or by followAssignments, which now finds op.
	op.follow()
	if op.currentGate() == nil {
		c.log.Warn("partition waits for its assignment from the cluster before it confirms or delivers",
			"queue", queue, "partition", partition)
	}
	return op
}

// beginInstance starts a new instance of an owned partition's log: every
// open is one, since a power cut may have cut the log back and the
// offsets written from here on are not those written before. The history
// lives in the log's directory, beside the records it describes; the new
// instance is in it, synced, before any record of it is written (an
// instance writes only once installed, ownedPartition.follow). A log
// without a history that is not new to a queue this node saw declared
// may lack records this node once held: it is marked as catching up, so
// it is no witness in a recovery. A history that cannot be saved is
// logged: the partition then writes nothing (see follow).
func (c *Cluster) beginInstance(copyID replication.CopyID, log *wal.Log) (replication.History, string) {
	queue, partition := copyID.Queue, copyID.Partition
	c.mu.Lock()
	c.logsOpened = append(c.logsOpened, copyID) // collectCopies checks it is still assigned
	c.mu.Unlock()
	fs := c.replicaFS
	dir := c.copyDir(copyID)
	// A cut or damage the broker's open found ends the copy's liveness.
	c.follower.NoteOpened(copyID, log.Recovery())
	h, err := replication.LoadHistory(fs, dir)
	if err != nil {
		c.log.Error("owned partition's history unreadable; starting a new one", "queue", queue, "partition", partition, "err", err)
		h = nil
	}
	if h == nil {
		var inc, epoch uint64
		c.node.read(func(s *control.State) {
			if inc = s.Queues[queue].Incarnation; inc != copyID.Incarnation {
				inc = 0 // another declaration's log: nothing says it is whole
				return
			}
			if as := s.Assignments[queue]; len(as) > 0 {
				epoch = as[0].Epoch
			}
		})
		// A log this node was installed to start afresh (a recovery
		// found no copy anywhere) holds everything the queue has.
		afresh := epoch > 0 && c.installedAt(queue, epoch) && log.WrittenNext() == log.Head()
		if !afresh && (inc == 0 || !c.node.Fresh(inc) || log.WrittenNext() > log.Head()) {
			if err := replication.MarkCatchUp(fs, dir, math.MaxUint64); err != nil {
				c.log.Error("owned partition without history not marked as catching up", "queue", queue, "partition", partition, "err", err)
			}
		}
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	instance := binary.LittleEndian.Uint64(id[:]) | 1 // never the legacy instance 0
	h = h.Start(log.Head()).Begin(instance, log.WrittenNext())
	if err := replication.SaveHistory(fs, dir, h); err != nil {
		c.log.Error("owned partition's history not saved", "queue", queue, "partition", partition, "err", err)
	}
	return h, dir
}

// EnsureSettings makes kv the cluster's settings where they differ, in the
// background: it proposes them once a leader is known, retrying until it
// succeeds or the node closes. A value the control plane refuses is
// logged and given up.
func (c *Cluster) EnsureSettings(kv map[string]string) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		delay := 100 * time.Millisecond
		for {
			differs := false
			c.node.read(func(s *control.State) {
				for k, v := range kv {
					differs = differs || s.Settings[k] != v
				}
			})
			if !differs {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := c.node.SetSettings(ctx, kv)
			cancel()
			switch {
			case err == nil:
				c.log.Info("cluster settings applied", "settings", kv)
				return
			case errors.Is(err, appliance.ErrInvalid):
				c.log.Error("cluster settings refused", "settings", kv, "err", err)
				return
			}
			select {
			case <-c.stop:
				return
			case <-time.After(delay):
			}
			delay = min(2*delay, 5*time.Second)
		}
	}()
}

// Gate returns the gate of a partition this node owns, once its
// assignment is known.
func (c *Cluster) Gate(queue string, partition int) (*replication.Gate, bool) {
	_, g := c.ownedGate(queue, partition)
	return g, g != nil
}

// ownedGate returns a partition this node owns and its gate; the gate is
// nil when the node does not own it or its assignment is not known yet.
func (c *Cluster) ownedGate(queue string, partition int) (*ownedPartition, *replication.Gate) {
	c.mu.Lock()
	op, ok := c.owned[ownedKey(queue, partition)]
	c.mu.Unlock()
	if !ok {
		return nil, nil
	}
	return op, op.currentGate()
}

// OwnerLog returns the log of a partition this node owns.
func (c *Cluster) OwnerLog(queue string, partition int) (*wal.Log, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	op, ok := c.owned[ownedKey(queue, partition)]
	if !ok {
		return nil, false
	}
	return op.log, true
}

// Close stops the streams, the node and the store of copies. Close the
// bound broker first.
func (c *Cluster) Close() error {
	c.fwdMu.Lock()
	close(c.stop)
	c.fwdMu.Unlock()
	c.closeForwarding() // ends forwarded publishes in flight
	c.wg.Wait()
	c.closeForwarding()
	c.mu.Lock()
	owned := c.owned
	c.owned = map[string]*ownedPartition{}
	c.mu.Unlock()
	for _, op := range owned {
		op.close()
	}
	// The copies first: their streams end, so the cluster port's handlers
	// return and the node can close.
	ferr := c.follower.Close()
	return errors.Join(ferr, c.node.Close())
}
