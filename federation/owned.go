package federation

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/federation/control"
	"github.com/fibril-edge/fibril/federation/replication"
	"github.com/fibril-edge/fibril/wal"
)

// ownedPartition is a partition this node owns: its gate and one stream
// per follower. It follows its assignment: a follower the assignment gains
// (a member joined, the replicas setting rose) gets a stream from offset 0
// and a place in the gate, and the gate takes the policy's count for the
// new number of copies. Followers are never dropped here.
//
// It writes only in an epoch this node was installed in (failover.go):
// until then it has no gate, Wait blocks, Floor keeps everything and
// Writable refuses. A log reopened under an assignment naming this node
// owner (a restart) is a new instance that asks for a recovery instead of
// resuming at its old end. A new epoch, or another owner, fences it for
// good: it writes nothing more, its streams end, and the broker closes
// the queue.
type ownedPartition struct {
	c         *Cluster
	queue     string
	partition int
	key       string
	// incarnation is the declaration the log belongs to (its directory
	// names it): an assignment of another is not this log's to write.
	incarnation uint64
	atStart     bool // opened by the broker's start, before Bind, and not served yet (closeStaleOpened; guarded by c.mu)
	log         *wal.Log
	dir         string        // the log's directory, which holds its history
	ready       chan struct{} // closed once gate is set
	done        chan struct{} // closed once the partition is closed
	fencedCh    chan struct{} // closed once fenced is set

	mu         sync.Mutex           // guards the fields below
	durability appliance.Durability // the mode the gate counts and the streams follow (SwitchMode)
	history    replication.History  // this instance's
	gate       *replication.Gate
	epoch      uint64   // the epoch the gate was made in
	followers  []string // those with a stream, in assignment order
	streams    map[string]*replication.Sender
	addrs      map[string]string // each stream's follower's cluster address
	hello      replication.Hello // the streams' Hello but for the mode (durability, above)
	closed     bool
	fenced     string // why the partition writes no more; "" while it may
}

// mode is the mode the partition's gate and streams follow now.
func (op *ownedPartition) mode() appliance.Durability {
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.durability
}

// currentGate is the partition's gate, nil until its assignment is known.
func (op *ownedPartition) currentGate() *replication.Gate {
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.gate
}

// followAssignments brings every owned partition in line with its
// assignment, at start and after every applied command, until Close.
func (c *Cluster) followAssignments() {
	defer c.wg.Done()
	for {
		changed := c.node.Changed()
		c.mu.Lock()
		owned := slices.Collect(maps.Values(c.owned))
		c.mu.Unlock()
		for _, op := range owned {
			op.follow()
		}
		c.checkProxies()
		select {
		case <-changed:
		case <-c.stop:
			return
		}
	}
}

// follow starts a stream for every follower of the current assignment
// that has none, after adding it to the gate (the stream's first report
// must find it there).
//
// It acts only on the replayed state: while a restarted node applies its
// raft log again, the states it passes through are history (an owner
// long replaced, a recovery long over), and acting on one would fence
// the partition for good.
func (op *ownedPartition) follow() {
	select {
	case <-op.c.node.Replayed():
	default:
		return // the change that ends the replay calls follow again
	}
	var a control.Assignment
	addrs := map[string]string{}
	op.c.node.read(func(s *control.State) {
		as := s.Assignments[op.queue]
		if op.partition >= len(as) {
			return // deleted: the broker detaches the partition
		}
		a = as[op.partition]
		a.Followers = slices.Clone(a.Followers)
		for _, f := range a.Followers {
			addrs[f] = s.Members[f].ClusterAddr
		}
	})
	me := op.c.node.opts.ID
	switch {
	case a.Owner == "":
		return // not known yet
	case a.Incarnation != op.incarnation:
		op.fence(fmt.Sprintf("the queue was declared again (incarnation %d): this log is incarnation %d's", a.Incarnation, op.incarnation))
		return
	case a.Owner != me:
		op.fence("the queue is owned by " + a.Owner)
		return
	case a.Sealing:
		op.fence(fmt.Sprintf("the queue is recovering at epoch %d", a.Epoch))
		return
	}
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.closed || op.fenced != "" {
		return
	}
	if op.gate != nil && a.Epoch != op.epoch {
		op.fenceLocked(fmt.Sprintf("epoch %d replaced epoch %d", a.Epoch, op.epoch))
		return
	}
	if op.gate == nil {
		if !op.c.installedAt(op.queue, a.Epoch) {
			op.c.askRecovery(op.queue, a.Incarnation, a.Epoch, "the owner reopened its log: a new instance never resumes writing at its old end")
			return
		}
		// The records this instance writes are the epoch's: in its
		// history, synced, before the first is written.
		h := op.history.Installed(a.Epoch)
		if err := replication.SaveHistory(op.c.replicaFS, op.dir, h); err != nil {
			op.c.log.Error("partition cannot write: its history is not saved", "queue", op.queue, "partition", op.partition, "err", err)
			return
		}
		op.history = h
		boundary := replication.Durable
		if control.Boundary(op.durability) == "written" {
			boundary = replication.Written
		}
		op.gate, op.epoch = replication.NewGate(boundary, a.Policy.Required(1), nil), a.Epoch
		// From here on this process writes every record of the log
		// itself: it is live (replication/live.go) until it latches.
		op.c.follower.MarkLive(op.copyID(a.Incarnation))
		close(op.ready)
		// Served once the broker's declare that attached it returns
		// (Cluster.serve): a subscribe let in now would find no queue.
		op.c.wg.Add(1)
		go op.watchLatch(a.Epoch, a.Incarnation)
	}
	var added []string
	for _, f := range a.Followers {
		if !slices.Contains(op.followers, f) {
			added = append(added, f)
		}
	}
	if len(added) == 0 {
		return
	}
	op.followers = append(op.followers, added...)
	required := a.Policy.Required(1 + len(op.followers))
	op.gate.SetFollowers(op.followers, required)
	op.hello = replication.Hello{Epoch: a.Epoch, Incarnation: a.Incarnation, Partition: uint32(op.partition),
		Queue: op.queue, Owner: me, History: op.history}
	for _, f := range added {
		if op.streams == nil {
			op.streams, op.addrs = map[string]*replication.Sender{}, map[string]string{}
		}
		op.addrs[f] = addrs[f]
		op.startStreamLocked(f)
	}
	op.c.log.Info("replicating partition", "queue", op.queue, "partition", op.partition,
		"new_followers", added, "policy", a.Policy.Describe(op.durability, 1+len(op.followers)))
}

// startStreamLocked starts the stream to follower f, its Hello naming the
// partition's mode now. op.mu is held.
func (op *ownedPartition) startStreamLocked(f string) {
	hello := op.hello
	hello.Durability = op.durability
	op.streams[f] = replication.StartSender(replication.SenderOptions{
		Hello:    hello,
		Follower: f,
		Addr:     op.addrs[f],
		Dial:     op.c.node.DialReplica,
		Log:      op.log,
		Gate:     op.gate,
		Logger:   op.c.log,
	})
}

var _ appliance.ModeSwitcher = (*ownedPartition)(nil)

// SwitchMode makes the gate count copies at d's boundary and restarts
// every stream with d in its Hello, so that each follower appends at d's
// boundary (a durable queue's copy syncs every batch, and syncs what it
// holds before it reports, follower.go). The broker calls it with the
// partition fenced (appliance.ModeSwitcher); the positions the gate holds
// stay, as they are never lowered.
func (op *ownedPartition) SwitchMode(d appliance.Durability) {
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.durability == d {
		return
	}
	op.durability = d
	if op.gate != nil {
		boundary := replication.Durable
		if control.Boundary(d) == "written" {
			boundary = replication.Written
		}
		op.gate.SetBoundary(boundary)
	}
	if op.closed || op.fenced != "" {
		return
	}
	for f, s := range op.streams {
		s.Close()
		op.startStreamLocked(f)
	}
}

// watchLatch fails the queue over when the owner's log latches after a
// storage failure: the owner can confirm nothing more, and the reopen
// that cuts it back to its last sync happens as it seals with the
// others.
func (op *ownedPartition) watchLatch(epoch, incarnation uint64) {
	defer op.c.wg.Done()
	select {
	case <-op.log.Latched():
	case <-op.done:
		return
	case <-op.c.stop:
		return
	}
	op.c.follower.MarkCut(op.copyID(incarnation)) // a failed sync may have dropped what it wrote
	op.fence("the owner's log latched after a storage failure")
	op.c.askRecovery(op.queue, incarnation, epoch, "the owner's log latched after a storage failure")
}

func (op *ownedPartition) copyID(incarnation uint64) replication.CopyID {
	return replication.CopyID{Queue: op.queue, Incarnation: incarnation, Partition: op.partition}
}

// fence stops the partition writing for good and ends its streams.
func (op *ownedPartition) fence(why string) {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.fenceLocked(why)
}

func (op *ownedPartition) fenceLocked(why string) {
	if op.fenced != "" || op.closed {
		return
	}
	op.fenced = why
	close(op.fencedCh)
	op.c.fo.setServing(op.queue, false)
	for _, s := range op.streams {
		op.c.wg.Add(1)
		go func() { defer op.c.wg.Done(); s.Close() }()
	}
	op.streams = nil
	op.c.log.Warn("partition stopped writing", "queue", op.queue, "partition", op.partition, "why", why)
}

// Writable is nil while the partition may write.
func (op *ownedPartition) Writable() error {
	op.mu.Lock()
	defer op.mu.Unlock()
	switch {
	case op.fenced != "":
		return fmt.Errorf("%w: partition %s/%d: %s", appliance.ErrUnavailable, op.queue, op.partition, op.fenced)
	case op.gate == nil:
		return fmt.Errorf("%w: partition %s/%d waits for the cluster to install this node as its owner", appliance.ErrUnavailable, op.queue, op.partition)
	}
	return nil
}

// AwaitWritable holds a publish, up to recoveryWait, while the partition
// waits for the cluster to install this node as its owner: a restarted
// owner's first publishes wait through its recovery. It returns at once
// once the partition is installed, fenced (the queue moved; the broker
// closes it) or closed.
func (op *ownedPartition) AwaitWritable(stop <-chan struct{}) {
	t := time.NewTimer(recoveryWait)
	defer t.Stop()
	select {
	case <-op.ready:
	case <-op.fencedCh:
	case <-op.done:
	case <-op.c.stop:
	case <-stop:
	case <-t.C:
	}
}

// close stops the streams; follow starts none after it.
func (op *ownedPartition) close() {
	op.mu.Lock()
	if !op.closed {
		close(op.done)
	}
	op.closed = true
	streams := op.streams
	op.streams = nil
	op.mu.Unlock()
	for _, s := range streams {
		s.Close()
	}
}

// streamStats are the counters of each follower's stream.
func (op *ownedPartition) streamStats() map[string]replication.SenderStats {
	op.mu.Lock()
	defer op.mu.Unlock()
	out := make(map[string]replication.SenderStats, len(op.streams))
	for f, s := range op.streams {
		out[f] = s.Stats()
	}
	return out
}

func (op *ownedPartition) Wait(stop <-chan struct{}, next uint64) error {
	return op.wait(stop, next, false)
}

// WaitDurable is Wait for a record appended under the durable rule
// (appliance.BoundaryWaiter).
func (op *ownedPartition) WaitDurable(stop <-chan struct{}, next uint64) error {
	return op.wait(stop, next, true)
}

// wait waits for the gate, and gives up once the partition is fenced: a
// fenced owner confirms nothing more (FAILOVER.md), though positions sent
// before its followers sealed may still arrive.
func (op *ownedPartition) wait(stop <-chan struct{}, next uint64, durable bool) error {
	select {
	case <-op.ready:
	case <-stop:
		return fmt.Errorf("%w (the partition's assignment is not known on this node yet)", replication.ErrStopped)
	}
	g := op.currentGate()
	if err := g.WaitFor(replication.WaitOptions{Stop: stop, Fenced: op.fencedCh, Durable: durable}, next); err != nil {
		return fmt.Errorf("%w (%s)", err, g.Pending(next))
	}
	return nil
}

func (op *ownedPartition) Floor() uint64 {
	if g := op.currentGate(); g != nil {
		return g.Floor(op.c.followerHold)
	}
	return 0
}

func (op *ownedPartition) Status() string {
	if err := op.Writable(); err != nil {
		return err.Error()
	}
	if g := op.currentGate(); g != nil {
		return g.Pending(op.log.WrittenNext())
	}
	return "waiting for the partition's assignment from the cluster"
}

func (op *ownedPartition) Detach() {
	op.close()
	op.c.declaredMu.Lock()
	delete(op.c.openLogs, op.copyID(op.incarnation)) // or a queue the broker failed to open would keep it
	op.c.declaredMu.Unlock()
	op.c.mu.Lock()
	if op.c.owned[op.key] == op {
		delete(op.c.owned, op.key)
	}
	op.c.mu.Unlock()
}
