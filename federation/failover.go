package federation

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/federation/control"
	"github.com/fibril-edge/fibril/federation/replication"
)

// Failover on a node (docs/decisions.md, "Failover and written-set
// recovery"; the control state's half is control/recovery.go):
//
//   - watchOwners, on the leader only, pings every member's cluster port
//     and proposes a recovery of each queue whose owner has not answered
//     for FailoverTimeout. One missed ping is not a failure: the owner
//     must stay silent for the whole timeout, and a new leader gives
//     every member a full timeout before it judges, except the leader it
//     followed, whose timeout runs from when it last heard from it (an
//     owner that was also the leader fails over an election sooner).
//   - An owner whose log was reopened (a restart, or the broker reopened
//     the queue) is a new instance: it never writes at its old end. Its
//     partition asks for a recovery instead (askRecovery), and takes part
//     in it as one copy among the others.
//   - recoverQueues, on every node, seals this node's copies of each
//     queue a recovery is installing (an owned queue is closed in the
//     broker first, so it stops writing), reports the seals, and, when
//     the control state installs this node as the owner, hands its copies
//     to the broker, which opens them as the owner's logs. A queue this
//     node served and no longer owns is closed in the broker; its logs
//     stay, as the copies a new owner's streams feed.
//
// A node's logs of a partition, owned or followed, live in one directory
// (logDir), so changing roles moves no file.

// DefaultFailoverTimeout is how long an owner may stay unreachable from
// the leader before its queues fail over.
const DefaultFailoverTimeout = 3 * time.Second

// recoveryWait bounds how long a publish or a subscription arriving
// during a recovery waits for the new owner.
const recoveryWait = 15 * time.Second

// failover is a node's recovery bookkeeping; its mutex guards the maps.
type failover struct {
	mu sync.Mutex
	// sealed: the epoch this process sealed (and reported) each queue at.
	sealed map[string]uint64
	// installs: the epoch this node may serve each queue at: one it won a
	// recovery of, or the first epoch of a queue it saw declared.
	installs map[string]uint64
	// started: the recoveries asked for, tail streams and re-seals
	// started, by key (startOnce).
	started map[string]bool
	// serving: the queues the local broker serves; served closes and is
	// replaced whenever that changes.
	serving map[string]bool
	served  chan struct{}
	// incs: the incarnation of each queue sealed and installs speak of;
	// a queue deleted and declared again starts with neither (forget).
	incs map[string]uint64
}

func newFailover() *failover {
	return &failover{sealed: map[string]uint64{}, installs: map[string]uint64{}, started: map[string]bool{},
		serving: map[string]bool{}, served: make(chan struct{}), incs: map[string]uint64{}}
}

// forgetLocked drops what f knew of queue when the state names a newer
// incarnation of it than the one it was learnt for. f.mu is held. An
// older one, from a state read before a newer one was acted on, forgets
// nothing: incarnations (the declaration's raft index) only rise.
func (f *failover) forgetLocked(queue string, inc uint64) {
	if inc > f.incs[queue] {
		f.incs[queue] = inc
		delete(f.sealed, queue)
		delete(f.installs, queue)
	}
}

func (f *failover) sealedAt(queue string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sealed[queue]
}

func (f *failover) setServing(queue string, on bool) {
	f.mu.Lock()
	if on {
		f.serving[queue] = true
	} else {
		delete(f.serving, queue)
	}
	close(f.served)
	f.served = make(chan struct{})
	f.mu.Unlock()
}

func (f *failover) servedCh() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.served
}

// logDir is where this node keeps its log of a queue's partition, owned
// or followed: the store of copies' directory for the queue's
// incarnation. Before the control state knows the queue (a restart) the
// newest incarnation on disk is the one.
func (c *Cluster) logDir(queue string, partition int) string {
	return c.copyDir(c.logCopy(queue, partition))
}

// copyDir is copy id's directory.
func (c *Cluster) copyDir(id replication.CopyID) string {
	return c.replicaFS.PathJoin(c.replicaDir, id.Queue, strconv.FormatUint(id.Incarnation, 10), strconv.Itoa(id.Partition))
}

// copyAt names the copy whose directory is dir (copyDir), if dir is one.
func (c *Cluster) copyAt(dir string) (replication.CopyID, bool) {
	fs := c.replicaFS
	incDir := fs.PathDir(dir)
	part, err := strconv.Atoi(fs.PathBase(dir))
	if err != nil || part < 0 {
		return replication.CopyID{}, false
	}
	inc, err := strconv.ParseUint(fs.PathBase(incDir), 10, 64)
	if err != nil {
		return replication.CopyID{}, false
	}
	id := replication.CopyID{Queue: fs.PathBase(fs.PathDir(incDir)), Incarnation: inc, Partition: part}
	return id, c.copyDir(id) == dir
}

// logCopy names the copy logDir is the directory of.
func (c *Cluster) logCopy(queue string, partition int) replication.CopyID {
	var inc uint64
	c.node.read(func(s *control.State) { inc = s.Queues[queue].Incarnation })
	if inc == 0 {
		inc = c.follower.NewestIncarnation(queue, partition)
	}
	return replication.CopyID{Queue: queue, Incarnation: inc, Partition: partition}
}

// mayServe says whether this node may open queue as its owner now, and
// records the epoch it does so at: a recovery installed this node (it
// sealed at that epoch and won), or the queue is new and this node saw
// it declared.
func (c *Cluster) mayServe(st *control.State, name string) bool {
	if !st.OwnedBy(name, c.node.opts.ID) {
		return false
	}
	a, q := st.Assignments[name][0], st.Queues[name]
	f := c.fo
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgetLocked(name, q.Incarnation)
	if f.installs[name] == a.Epoch {
		return true
	}
	if q.LastFailover == nil && a.Epoch == 1 && c.node.Fresh(q.Incarnation) {
		f.installs[name] = a.Epoch
		return true
	}
	return false
}

// freshQueue reports whether name is a queue this node saw declared and
// that never failed over: its first owner serves it without a recovery.
func (c *Cluster) freshQueue(st *control.State, name string) bool {
	as, q := st.Assignments[name], st.Queues[name]
	return len(as) > 0 && q.LastFailover == nil && as[0].Epoch == 1 && c.node.Fresh(q.Incarnation)
}

// installedAt reports whether this node may write queue at epoch.
func (c *Cluster) installedAt(queue string, epoch uint64) bool {
	c.fo.mu.Lock()
	defer c.fo.mu.Unlock()
	return c.fo.installs[queue] == epoch
}

// askRecovery proposes, in the background, that the declaration inc of
// queue leave epoch. It is asked once per epoch; the control state
// ignores it once the queue has moved on or been declared again.
func (c *Cluster) askRecovery(queue string, inc, epoch uint64, reason string) {
	c.startOnce(fmt.Sprintf("recover %s#%d@%d", queue, inc, epoch), func(stop <-chan struct{}) {
		select {
		case <-c.node.Replayed():
		case <-stop:
			return
		}
		c.proposeRecovery(queue, inc, epoch, reason)
	})
}

// proposeRecovery proposes that the declaration inc of queue leave
// epoch, retrying while no leader is known, until it succeeds, the queue
// moves past epoch or is declared again, or the node closes.
func (c *Cluster) proposeRecovery(queue string, inc, epoch uint64, reason string) {
	delay := 50 * time.Millisecond
	for {
		current := false
		c.node.read(func(s *control.State) {
			as := s.Assignments[queue]
			current = len(as) > 0 && as[0].Incarnation == inc && as[0].Epoch == epoch && !as[0].Sealing
		})
		if !current {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r := c.node.propose(ctx, control.Command{Op: control.OpRecover,
			Recover: &control.Recover{Queue: queue, Incarnation: inc, Epoch: epoch, Reason: reason, At: time.Now().UnixNano()}})
		cancel()
		if r.Err == nil {
			c.log.Warn("queue recovery started", "queue", queue, "from_epoch", epoch, "reason", reason)
			return
		}
		if errors.Is(r.Err, control.ErrUnknownQueue) {
			return
		}
		select {
		case <-c.stop:
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

// recoverQueues seals, installs and releases this node's queues as the
// control state's recoveries go, from the replayed state on, until Close.
// A step that fails is tried again at the next change or a second later.
//
// It starts once the broker is bound, too: until then the broker may
// still be opening the queues it had, and a seal that ran meanwhile could
// not close them first (releaseLocal), so the broker and the seal would
// both open a partition's log, and the broker's copy, fenced by the
// seal, would stop writing for good.
func (c *Cluster) recoverQueues() {
	defer c.wg.Done()
	for _, ready := range []<-chan struct{}{c.node.Replayed(), c.bound} {
		select {
		case <-ready:
		case <-c.stop:
			return
		}
	}
	me := c.node.opts.ID
	for {
		changed := c.node.Changed()
		st := c.node.shared()
		failed := false
		for _, name := range slices.Sorted(maps.Keys(st.Assignments)) {
			as := st.Assignments[name]
			if len(as) == 0 {
				continue
			}
			a := as[0]
			var current uint64
			c.node.read(func(s *control.State) { current = s.Queues[name].Incarnation })
			if current != a.Incarnation {
				// Deleted, or declared again, since this pass read its
				// state: what it would do is for a declaration gone, and
				// the failover bookkeeping (by name) is the newer one's.
				continue
			}
			c.fo.mu.Lock()
			c.fo.forgetLocked(name, a.Incarnation)
			c.fo.mu.Unlock()
			var err error
			switch {
			case !slices.Contains(a.Copies(), me):
			case a.Sealing && c.fo.sealedAt(name) < a.Epoch:
				err = c.sealQueue(st, name)
			case a.Sealing:
				c.shipTails(st, name)
			case a.Owner == me && c.fo.sealedAt(name) == a.Epoch && !c.installedAt(name, a.Epoch):
				err = c.install(st, name)
			case a.Owner == me && !c.installedAt(name, a.Epoch) && !c.node.liveKnown():
				// A blank node does not know yet which queues it saw
				// declared: it neither serves nor asks until it does
				// (Node.learnLive wakes this loop).
			case a.Owner == me && !c.installedAt(name, a.Epoch) && !c.freshQueue(st, name):
				// This process owns the queue at an epoch it was never
				// installed in: the node restarted after it sealed, or
				// after it served the queue, or lost its data. It can
				// never write at this epoch (a reopened log is a new
				// instance), whether or not its broker opened the
				// queue again at start, so only a recovery moves the
				// queue on.
				c.askRecovery(name, a.Incarnation, a.Epoch, "the owner restarted: a new instance never resumes writing at its old end")
			case a.Owner != me:
				err = c.releaseLocal(name, "the queue is owned by "+a.Owner)
			}
			if err != nil {
				failed = true
				c.log.Error("queue recovery step failed; retrying", "queue", name, "epoch", a.Epoch, "err", err)
			}
		}
		var retry <-chan time.Time
		if failed {
			retry = time.After(time.Second)
		}
		select {
		case <-changed:
		case <-retry:
		case <-c.stop:
			return
		}
	}
}

// sealQueue seals this node's copies of a queue a recovery is installing
// and reports them. An owned queue is closed in the broker first: from
// then on this node writes nothing of it.
func (c *Cluster) sealQueue(st *control.State, name string) error {
	as := st.Assignments[name]
	epoch := as[0].Epoch
	if err := c.releaseLocal(name, fmt.Sprintf("recovery at epoch %d", epoch)); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seals := make([]control.Seal, len(as))
	for i, a := range as {
		res, err := c.follower.Seal(ctx, replication.CopyID{Queue: name, Incarnation: a.Incarnation, Partition: i}, epoch)
		if err != nil {
			return err
		}
		seals[i] = control.Seal{End: res.End, LastEpoch: res.LastEpoch, Witness: res.Witness && !res.NoCopy,
			Cut: res.Cut && !res.NoCopy, Acked: res.Acked, NoCopy: res.NoCopy}
	}
	// Sealed before the report is proposed: the apply that installs this
	// node may come before propose returns, and recoverQueues must then
	// install, not take the queue for one this process never sealed.
	c.fo.mu.Lock()
	before := c.fo.sealed[name]
	c.fo.sealed[name] = epoch
	c.fo.mu.Unlock()
	r := c.node.propose(ctx, control.Command{Op: control.OpSeal, Seal: &control.SealReport{
		Queue: name, Incarnation: as[0].Incarnation, Epoch: epoch, Node: c.node.opts.ID, Seals: seals, At: time.Now().UnixNano()}})
	if r.Err != nil {
		c.fo.mu.Lock()
		if c.fo.sealed[name] == epoch {
			c.fo.sealed[name] = before // seal and report again
		}
		c.fo.mu.Unlock()
		return fmt.Errorf("report seals: %w", r.Err)
	}
	c.log.Info("queue sealed for recovery", "queue", name, "epoch", epoch, "seals", seals)
	return nil
}

// shipTails does this node's part when a recovery has the queue's chosen
// owner take better tails (control.Assignment.TailFrom): it streams each
// partition's tail it holds to the chosen owner, and, as the chosen
// owner, seals again once it holds every tail. Each is started once per
// epoch and ends with the recovery.
func (c *Cluster) shipTails(st *control.State, name string) {
	as := st.Assignments[name]
	me, epoch := c.node.opts.ID, as[0].Epoch
	for i, a := range as {
		if a.TailFrom == me && a.TailTo != "" {
			c.startOnce(fmt.Sprintf("tail %s#%d/%d@%d", name, a.Incarnation, i, epoch), func(stop <-chan struct{}) {
				c.sendTail(st, name, i, epoch, stop)
			})
		}
	}
	if slices.ContainsFunc(as, func(a control.Assignment) bool { return a.TailTo == me }) {
		c.startOnce(fmt.Sprintf("reseal %s#%d@%d", name, as[0].Incarnation, epoch), func(stop <-chan struct{}) {
			c.resealAfterTails(st, name, epoch, stop)
		})
	}
}

// startOnce runs f in the background once per key; its stop channel
// closes when the queue's recovery at the key's epoch is over or the node
// closes.
func (c *Cluster) startOnce(key string, f func(stop <-chan struct{})) {
	c.fo.mu.Lock()
	if c.fo.started[key] {
		c.fo.mu.Unlock()
		return
	}
	c.fo.started[key] = true
	c.fo.mu.Unlock()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f(c.stop)
	}()
}

// recoveryOver reports whether the recovery of queue at epoch ended.
func (c *Cluster) recoveryOver(queue string, epoch uint64) bool {
	over := true
	c.node.read(func(s *control.State) {
		as := s.Assignments[queue]
		over = len(as) == 0 || !as[0].Sealing || as[0].Epoch != epoch
	})
	return over
}

// sendTail streams this node's sealed copy of queue's partition to the
// chosen owner until it holds all of it or the recovery ends.
func (c *Cluster) sendTail(st *control.State, queue string, partition int, epoch uint64, stop <-chan struct{}) {
	a := st.Assignments[queue][partition]
	id := replication.CopyID{Queue: queue, Incarnation: a.Incarnation, Partition: partition}
	log, ok := c.follower.Log(queue, partition)
	if !ok {
		c.log.Error("no open copy to send the tail of", "queue", queue, "partition", partition)
		return
	}
	h, err := c.follower.CopyHistory(id)
	if err != nil {
		c.log.Error("cannot read the copy's history to send its tail", "queue", queue, "partition", partition, "err", err)
		return
	}
	gate := replication.NewGate(replication.Written, 1, []string{a.TailTo})
	s := replication.StartSender(replication.SenderOptions{
		Hello: replication.Hello{Epoch: epoch, Incarnation: a.Incarnation, Durability: st.Queues[queue].Config.Durability,
			Partition: uint32(partition), Queue: queue, Owner: c.node.opts.ID, History: h},
		Follower: a.TailTo, Addr: st.Members[a.TailTo].ClusterAddr, Dial: c.node.DialReplica,
		Log: log, Gate: gate, Logger: c.log,
	})
	defer s.Close()
	c.log.Warn("sending a partition's better tail to the queue's next owner", "queue", queue, "partition", partition,
		"to", a.TailTo, "end", log.WrittenNext())
	for !c.recoveryOver(queue, epoch) {
		changed := c.node.Changed()
		select {
		case <-changed:
		case <-stop:
			return
		}
	}
}

// resealAfterTails, on the chosen owner, seals and reports again once its
// copy of every partition it takes a tail of reaches the end its source
// reported.
func (c *Cluster) resealAfterTails(st *control.State, name string, epoch uint64, stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	me := c.node.opts.ID
	for i, a := range st.Assignments[name] {
		if a.TailTo != me {
			continue
		}
		var end uint64
		for _, sl := range a.Seals {
			if sl.Node == a.TailFrom {
				end = sl.End
			}
		}
		for {
			log, ok := c.follower.Log(name, i)
			if ok {
				if _, err := log.WaitWritten(ctx, end); err == nil {
					break
				}
			}
			if ctx.Err() != nil || c.recoveryOver(name, epoch) {
				return
			}
			select { // the copy is being reopened: look again at the next change
			case <-c.node.Changed():
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return
			}
		}
	}
	if c.recoveryOver(name, epoch) {
		return
	}
	c.fo.mu.Lock()
	c.fo.sealed[name] = 0 // seal again
	c.fo.mu.Unlock()
	if err := c.sealQueue(c.node.shared(), name); err != nil {
		c.log.Error("sealing again after taking the better tails failed", "queue", name, "err", err)
	}
}

// install makes this node the queue's owner at the epoch a recovery
// installed it in: its copies are handed to the broker, which opens them
// as the owner's logs and serves them once enough copies hold them.
func (c *Cluster) install(st *control.State, name string) error {
	as := st.Assignments[name]
	for i := range as {
		if err := c.follower.Release(name, i); err != nil {
			return fmt.Errorf("hand copy %s/%d to the broker: %w", name, i, err)
		}
	}
	c.fo.mu.Lock()
	c.fo.installs[name] = as[0].Epoch
	c.fo.mu.Unlock()
	// The newest state: serve ignores one older than a state it acted on.
	if err := c.serve(c.node.shared(), name); err != nil {
		c.fo.mu.Lock()
		delete(c.fo.installs, name) // the next pass tries again
		c.fo.mu.Unlock()
		return err
	}
	c.log.Warn("this node now owns the queue", "queue", name, "epoch", as[0].Epoch)
	return nil
}

// releaseLocal closes a queue in the local broker, if it serves it,
// keeping its logs: they are this node's copies now.
func (c *Cluster) releaseLocal(name, why string) error {
	b := c.boundBroker()
	if b == nil || c.isLocal(name) {
		return nil
	}
	// Looked at under serveMu, as closeStaleOpened and serve act: a
	// queue another of them is closing is found still open.
	c.serveMu.Lock()
	defer c.serveMu.Unlock()
	if _, err := b.QueueInfo(name); errors.Is(err, appliance.ErrNotFound) {
		return nil
	}
	c.fenceQueue(name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.DeleteQueue(ctx, name); err != nil && !errors.Is(err, appliance.ErrNotFound) {
		return fmt.Errorf("close queue %s in the local broker: %w", name, err)
	}
	c.undeclareLocked(name)
	c.fo.setServing(name, false)
	c.log.Warn("stopped serving queue", "queue", name, "why", why)
	return nil
}

// fenceQueue stops every owned partition of queue from writing.
func (c *Cluster) fenceQueue(name string) {
	c.mu.Lock()
	var ops []*ownedPartition
	for _, op := range c.owned {
		if op.queue == name {
			ops = append(ops, op)
		}
	}
	c.mu.Unlock()
	for _, op := range ops {
		op.fence("the queue is recovering")
	}
}

// watchOwners is the leader's failure detector (see above).
func (c *Cluster) watchOwners() {
	defer c.wg.Done()
	timeout := c.failoverTimeout
	tick := max(timeout/6, 10*time.Millisecond)
	lastSeen := map[string]time.Time{}
	leading := false
	var lastLeader string // the leader this node followed, and when it last heard from it
	var lastContact time.Time
	for {
		select {
		case <-c.stop:
			return
		case <-time.After(tick):
		}
		if !c.node.IsLeader() {
			leading = false
			if id, _ := c.node.Leader(); id != "" {
				lastLeader, lastContact = id, c.node.raft.LastContact()
			}
			continue
		}
		st := c.node.shared()
		now := time.Now()
		if !leading {
			clear(lastSeen)
			leading = true
			// The leader this node followed was last heard from then:
			// its timeout runs from there, not from the election.
			if lastLeader != "" && lastLeader != c.node.opts.ID && !lastContact.IsZero() {
				lastSeen[lastLeader] = lastContact
			}
		}
		var mu sync.Mutex // guards answered
		answered := map[string]time.Time{}
		var wg sync.WaitGroup
		for id, m := range st.Members {
			if _, ok := lastSeen[id]; !ok {
				lastSeen[id] = now // a full timeout for every member a new leader sees
			}
			if id == c.node.opts.ID {
				lastSeen[id] = now
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), tick)
				defer cancel()
				if c.node.ping(ctx, m.ClusterAddr) == nil {
					mu.Lock()
					answered[id] = time.Now()
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		maps.Copy(lastSeen, answered)
		for _, name := range slices.Sorted(maps.Keys(st.Assignments)) {
			as := st.Assignments[name]
			if len(as) == 0 || as[0].Sealing {
				continue
			}
			a := as[0]
			if silent := time.Since(lastSeen[a.Owner]); silent > timeout {
				c.askRecovery(name, a.Incarnation, a.Epoch, fmt.Sprintf("owner %s unreachable for %v", a.Owner, silent.Round(time.Millisecond)))
			}
		}
	}
}

// ownedWritable is nil when this node writes queue's partition.
func (c *Cluster) ownedWritable(queue string, partition int) error {
	c.mu.Lock()
	op, ok := c.owned[ownedKey(queue, partition)]
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s/%d is not open here", appliance.ErrUnavailable, queue, partition)
	}
	return op.Writable()
}
