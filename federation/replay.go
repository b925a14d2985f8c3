package federation

import (
	"fmt"

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
func (n *Node) Fresh(index uint64) bool {
	return n.liveSet.Load() && index > n.liveFrom.Load()
}

// noteLive fixes where fresh commands begin, at the first applied change:
// after what the node's own log held at open, or, for a node that opened
// with no raft state, after everything the cluster had committed when it
// first heard from it.
func (n *Node) noteLive() {
	if !n.blank {
		return // liveFrom is replayAt, set at open
	}
	n.liveOnce.Do(func() {
		from := n.fsm.Applied()
		if n.raft != nil {
			from = max(from, n.raft.CommitIndex())
		}
		n.liveFrom.Store(from)
		n.liveSet.Store(true)
	})
}
