package federation

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fibril-edge/fibril/federation/control"
	"github.com/hashicorp/raft"
)

// A node that restarts opens with an empty state machine: raft replays
// its log (and restores its snapshot) from there, and the followers' logs
// reach it later still. Decisions that destroy data on the strength of
// the state (removing a copy the state no longer assigns to this node)
// must wait until the state has come back at least to where it was.
//
// replayTarget is that point: the index of the last command the node's
// own log held when it opened. Configuration changes and the no-ops of
// leader elections never reach the state machine, so they do not count.
// A log that holds no command (a new node, or one whose log a snapshot
// has compacted away; raft restores a snapshot before NewRaft returns)
// gives 0: the state as raft opens it is already the replayed one.
func replayTarget(logs raft.LogStore) (uint64, error) {
	first, err := logs.FirstIndex()
	if err != nil {
		return 0, fmt.Errorf("federation: read the raft log's first index: %w", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return 0, fmt.Errorf("federation: read the raft log's last index: %w", err)
	}
	for i := last; i >= first && i > 0; i-- {
		var l raft.Log
		if err := logs.GetLog(i, &l); errors.Is(err, raft.ErrLogNotFound) {
			// A gap: a node that was down long took a snapshot past its
			// old entries, and nothing after the gap is a command. The
			// snapshot is the replayed state (Open takes the larger of
			// this and what raft restored).
			return 0, nil
		} else if err != nil {
			return 0, fmt.Errorf("federation: read raft log entry %d: %w", i, err)
		}
		if l.Type == raft.LogCommand {
			return i, nil
		}
	}
	return 0, nil
}

// Replayed returns a channel closed once this node's state machine has
// applied every command its own raft log held when the node opened: from
// then on its state is at least as new as it was before a restart.
func (n *Node) Replayed() <-chan struct{} { return n.replayed }

// checkReplayed closes replayed once the state machine reaches the
// target. Called at open and after every applied command.
func (n *Node) checkReplayed() {
	if n.fsm.Applied() < n.replayAt {
		return
	}
	n.replayOnce.Do(func() {
		n.log.Debug("control state replayed", "index", n.replayAt)
		close(n.replayed)
	})
}

// Fresh reports whether the command at index was applied while this node
// was up: not replayed from its own log after a restart, nor caught up
// from the leader by a node whose raft state was empty at open (a wiped
// node rejoining). A queue declared at a fresh index is one this node
// saw created, so a log it creates for it holds everything the queue
// ever had; any other log it creates may lack what the node once held.
// Until a blank node has heard from the leader where that is (learnLive),
// nothing is fresh to it.
func (n *Node) Fresh(index uint64) bool {
	return n.liveSet.Load() && index > n.liveFrom.Load()
}

// liveKnown reports whether Fresh can tell yet: false only while a blank
// node waits for the leader's answer (learnLive).
func (n *Node) liveKnown() bool { return n.liveSet.Load() }

// learnLive fixes, for a node that opened with no raft state, where fresh
// commands begin, by asking the leader before this node announces
// itself. A node that is not a member yet (a new node) can be named by no
// queue until its announcement, which comes after the answer: every
// command is fresh to it. A member (a node whose raft state was wiped)
// takes as fresh only what the leader applies after its answer: what was
// committed before may name it from before the wipe, however many
// batches its catch-up takes (its own commit index after the first batch
// is only that batch's end: a wiped owner took queues declared later in
// its catch-up as fresh, and would have served them from an empty log).
// It retries until a leader answers or the node closes, then wakes
// whoever waits on Changed.
func (n *Node) learnLive() {
	stopped, stop := context.WithCancel(context.Background())
	defer stop()
	go func() { // Close does not wait out a request
		select {
		case <-n.stop:
			stop()
		case <-stopped.Done():
		}
	}()
	backoff := n.opts.ElectionTimeout / 20
	for failures := 1; ; failures++ {
		ctx, cancel := context.WithTimeout(stopped, 4*n.opts.ElectionTimeout)
		idx, member, err := n.askLive(ctx, n.opts.ID)
		cancel()
		if err == nil {
			if member {
				n.liveFrom.Store(max(idx, n.fsm.Applied()))
			} else {
				n.liveFrom.Store(0)
			}
			n.liveSet.Store(true)
			n.log.Debug("commands live from", "index", n.liveFrom.Load(), "member", member)
			n.wake()
			return
		}
		if failures%20 == 0 {
			// Queues this node owns are neither served nor recovered
			// until it hears: say so where an operator looks.
			n.log.Warn("no leader has said yet where this node's live commands begin; its queues wait", "tries", failures, "err", err)
		} else {
			n.log.Debug("asking the leader where this node's live commands begin", "err", err)
		}
		select {
		case <-stopped.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, n.opts.ElectionTimeout/4)
	}
}

// askLive answers a Live request for node id here when this node leads,
// else passes it leaderward.
func (n *Node) askLive(ctx context.Context, id string) (uint64, bool, error) {
	if n.raft.State() == raft.Leader {
		return n.liveAnswer(ctx, id)
	}
	resp, err := n.requestLeaderward(ctx, id, controlRequest{Live: id})
	return resp.Index, resp.Member, err
}

// liveAnswer is the leader's answer to a Live request: once a barrier has
// applied every committed command (a new leader's commit index lags until
// an entry of its term commits, and a deposed one cannot commit the
// barrier), the applied index and whether id is a member.
func (n *Node) liveAnswer(ctx context.Context, id string) (uint64, bool, error) {
	if err := n.awaitRaft(ctx, n.raft.Barrier(time.Until(deadline(ctx)))); err != nil {
		return 0, false, fmt.Errorf("%w: barrier: %w", ErrNoLeader, err)
	}
	var member bool
	var applied uint64
	n.read(func(s *control.State) { _, member = s.Members[id]; applied = s.Applied })
	return applied, member, nil
}

// awaitLive waits until Fresh can tell (liveKnown), or ctx ends.
func (n *Node) awaitLive(ctx context.Context) error {
	for {
		changed := n.Changed()
		if n.liveKnown() {
			return nil
		}
		select {
		case <-changed:
		case <-n.stop:
			return ErrClosed
		case <-ctx.Done():
			return fmt.Errorf("the leader has not said where this node's live commands begin: %w", ctx.Err())
		}
	}
}
