package federation

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/fibril-edge/fibril/federation/control"
	"github.com/fibril-edge/fibril/federation/replication"
)

// This node's copies follow the control state:
//
//   - accept lets a replication stream in only when the assignment of its
//     partition names the Hello's owner as owner, this node among the
//     followers, the Hello's incarnation, and an epoch no higher than the
//     Hello's. A state that has not caught up (a node just restarted, a
//     declaration or a new follower just made) is waited for, up to
//     acceptWait, before the stream is refused; the owner's sender retries.
//   - keeps says whether the state still assigns a copy to this node.
//     Until the state has caught up (Cluster.caughtUp: replayed, and a
//     node that opened with no raft state at its leader's index) it keeps
//     everything: the state of a node that just opened is not
//     authoritative.
//   - collectCopies, once the state has caught up, removes the copies the
//     state no longer assigns to this node (the queue was deleted, or
//     deleted and declared again), the ones on disk included, and does so
//     again after every applied command that took one away; the log of a
//     queue the local broker still serves waits until the broker closed it.

// collectRetry is how long a failed collection waits before it is tried
// again, if no change comes first.
const collectRetry = 5 * time.Second

// acceptWait bounds how long a Hello waits for this node's control state
// to assign the copy it names.
const acceptWait = 5 * time.Second

// accept is the Follower's Accept hook.
func (c *Cluster) accept(ctx context.Context, h replication.Hello) error {
	select {
	case <-c.nodeSet:
	case <-ctx.Done():
		return fmt.Errorf("node closing: %w", ctx.Err())
	}
	ctx, cancel := context.WithTimeout(ctx, acceptWait)
	defer cancel()
	var verdict error
	err := c.node.waitFor(ctx, func(s *control.State) bool {
		var final bool
		final, verdict = c.checkHello(s, h)
		return verdict == nil || final
	})
	switch {
	case verdict != nil && err != nil:
		return fmt.Errorf("%w (this node's control state, at index %d, did not change within %v)",
			verdict, c.node.fsm.Applied(), acceptWait)
	case verdict != nil:
		return verdict
	}
	return err
}

// checkHello says whether s lets the stream h feed this node's copy, and
// whether a refusal is final: a state that has applied the queue's
// declaration (index h.Incarnation) and has no such partition under that
// incarnation never will, an epoch below the assignment's never rises, and
// at the assignment's epoch the owner is the assignment's. Other refusals
// may clear as the state catches up (a follower added, a new owner at a
// higher epoch).
func (c *Cluster) checkHello(s *control.State, h replication.Hello) (final bool, refusal error) {
	me := c.node.opts.ID
	applied := s.Applied >= h.Incarnation && h.Incarnation > 0
	as := s.Assignments[h.Queue]
	if int(h.Partition) >= len(as) {
		return applied, fmt.Errorf("no partition %s/%d in this node's control state (incarnation %d)",
			h.Queue, h.Partition, h.Incarnation)
	}
	a := as[h.Partition]
	switch {
	case a.Sealing && a.Incarnation == h.Incarnation && a.TailTo == me && a.TailFrom == h.Owner && a.Epoch == h.Epoch:
		return true, nil // the better tail this node takes before it owns the queue
	case a.Sealing && a.Incarnation == h.Incarnation:
		return false, fmt.Errorf("%s/%d is recovering at epoch %d: no owner streams until it is installed", h.Queue, h.Partition, a.Epoch)
	case a.Incarnation != h.Incarnation:
		return applied, fmt.Errorf("queue %s is incarnation %d in this node's control state, the stream's is %d",
			h.Queue, a.Incarnation, h.Incarnation)
	case h.Epoch < a.Epoch:
		return true, fmt.Errorf("stale epoch %d: %s/%d is at epoch %d", h.Epoch, h.Queue, h.Partition, a.Epoch)
	case a.Owner != h.Owner:
		// An owner at the assignment's epoch is the assignment's owner; a
		// higher epoch may name an owner this state has not seen yet.
		return h.Epoch <= a.Epoch, fmt.Errorf("%s/%d is owned by %s, not %s", h.Queue, h.Partition, a.Owner, h.Owner)
	case !slices.Contains(a.Followers, me):
		return false, fmt.Errorf("%s is not a follower of %s/%d (followers %v)", me, h.Queue, h.Partition, a.Followers)
	}
	return true, nil
}

// keeps is the Follower's Keep hook.
func (c *Cluster) keeps(id replication.CopyID) bool {
	select {
	case <-c.nodeSet:
	default:
		return true
	}
	select {
	case <-c.node.Replayed():
	default:
		return true
	}
	if !c.caughtUp() || !c.isBound() {
		return true // a blank node's state may not assign it yet; the broker may be about to reopen it
	}
	var keep bool
	c.node.read(func(s *control.State) { keep = s.Holds(c.node.opts.ID, id.Queue, id.Incarnation, id.Partition) })
	return keep
}

// collectCopies removes the copies the state no longer assigns to this
// node, once it has caught up (caughtUp) and again after every applied command that
// may have left one behind, until Close. Walking every copy's directory
// costs a read of each, so the first collection walks, and so does one
// after a log opened since the last look (a copy's, or an owned
// partition's) that the state does not assign now (a change this loop did
// not see assigned it, and a later one took it back); otherwise only the
// copies the state assigned at the last look and no longer does are
// looked at (a deletion touches only its own), and declarations and the
// like, which only add, cost nothing. The log of a queue the local broker
// serves is the broker's until it closes it: the Follower leaves it
// (brokerServes, its InUse hook), and the broker's delete
// (undeclareLocked) has that queue's directory looked at again. A failed
// collection walks again, at the next change or after collectRetry.
func (c *Cluster) collectCopies() {
	defer c.wg.Done()
	// Not before the broker is bound either: its start reopens the logs
	// it owned, which the state may no longer assign (a queue deleted, or
	// declared again, while this node was down); each must be there for
	// it to open and close as another declaration's (LogDir).
	for _, ready := range []<-chan struct{}{c.node.Replayed(), c.bound} {
		select {
		case <-ready:
		case <-c.stop:
			return
		}
	}
	var held map[replication.CopyID]bool // nil: collect
	for {
		changed := c.node.Changed()
		// The opened logs are taken before the state is read: a log is
		// opened only once the state assigns it, so one opened after this
		// read is not mistaken for one the state took back.
		opened := append(c.follower.TakeOpened(), c.takeLogsOpened()...)
		unserved := c.takeUnserved()
		now := c.heldCopies()
		var removed []replication.CopyID
		var err error
		switch lost := lostFrom(held, now); {
		case !c.caughtUp():
			// A blank node keeps everything (keeps) until it has caught
			// up; then it walks every copy once.
			now = nil
		case held == nil || slices.ContainsFunc(opened, func(id replication.CopyID) bool { return !now[id] }):
			removed, err = c.follower.Collect()
		case len(lost) > 0 || len(unserved) > 0:
			removed, err = c.follower.CollectAmong(lost, unserved)
		}
		var retry <-chan time.Time
		if err != nil {
			c.log.Error("cannot remove copies this node no longer follows; retrying", "err", err)
			now = nil // walk them all next time
			retry = time.After(collectRetry)
		}
		for _, id := range removed {
			c.log.Info("removed a copy this node no longer follows", "queue", id.Queue,
				"partition", id.Partition, "incarnation", id.Incarnation)
		}
		held = now
		select {
		case <-changed:
		case <-c.collectKick:
		case <-retry:
		case <-c.stop:
			return
		}
	}
}

// takeLogsOpened returns the owned partitions' logs opened since the
// last call.
func (c *Cluster) takeLogsOpened() []replication.CopyID {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := c.logsOpened
	c.logsOpened = nil
	return ids
}

// heldCopies is the set of copies the state assigns to this node.
func (c *Cluster) heldCopies() map[replication.CopyID]bool {
	me := c.node.opts.ID
	held := map[replication.CopyID]bool{}
	c.node.read(func(s *control.State) {
		for name, as := range s.Assignments {
			for i, a := range as {
				if slices.Contains(a.Copies(), me) {
					held[replication.CopyID{Queue: name, Incarnation: a.Incarnation, Partition: i}] = true
				}
			}
		}
	})
	return held
}

// lostFrom lists the copies of before that now does not have.
func lostFrom(before, now map[replication.CopyID]bool) []replication.CopyID {
	var lost []replication.CopyID
	for id := range before {
		if !now[id] {
			lost = append(lost, id)
		}
	}
	return lost
}
