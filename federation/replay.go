package federation

import (
	"context"
	"fmt"
	"time"

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
		if err := logs.GetLog(i, &l); err != nil {
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
// commands begin: after the leader's commit index, asked once this node
// is up. Every command committed by then was committed before this node
// could have seen it created, however many batches its catch-up takes (its
// own commit index after the first batch is only that batch's end: a
// wiped owner took queues declared later in its catch-up as fresh and
// would serve them from an empty log); a command committed after the
// answer was proposed after this node was back. It retries until a
// leader answers or the node closes, then wakes whoever waits on Changed.
func (n *Node) learnLive() {
	defer n.wg.Done()
	backoff := n.opts.ElectionTimeout / 20
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*n.opts.ElectionTimeout)
		idx, err := n.leaderCommitIndex(ctx)
		cancel()
		if err == nil {
			n.liveFrom.Store(max(idx, n.fsm.Applied()))
			n.liveSet.Store(true)
			n.log.Debug("commands live from", "index", n.liveFrom.Load())
			n.wake()
			return
		}
		n.log.Debug("asking the leader where this node's live commands begin", "err", err)
		select {
		case <-n.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, n.opts.ElectionTimeout/4)
	}
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

// leaderCommitIndex is the leader's commit index: this node's own when it
// leads, else asked of the leader.
func (n *Node) leaderCommitIndex(ctx context.Context) (uint64, error) {
	if n.raft.State() == raft.Leader {
		return n.raft.CommitIndex(), nil
	}
	_, addr := n.Leader()
	if addr == "" {
		return 0, ErrNoLeader
	}
	resp, err := n.request(ctx, addr, controlRequest{CommitIndex: true})
	if err != nil {
		return 0, err
	}
	if r := decodeResult(resp); r.Err != nil {
		return 0, r.Err
	}
	return resp.Index, nil
}
