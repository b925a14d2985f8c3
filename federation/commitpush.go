package federation

import (
	"context"
	"errors"

	"github.com/hashicorp/raft"
)

// A follower learns that a command committed from the leader's next
// AppendEntries. While commands flow, the next one carries it; after the
// last, raft sends one with no entries only when CommitTimeout (50 to 100
// ms here) runs out. Every follower therefore applied a lone command that
// much late: a declare or a deletion proposed through a node that does not
// lead (it answers once it applied the command itself: proposeSeen), and
// each step of a recovery, whose copies act on the command before.
//
// pushCommits ends that wait: after the leader applies commands, it
// appends a barrier, an entry the state machine never sees. raft sends it
// at once, with the commit index. One barrier is in flight at a time;
// commands applied meanwhile get the next, so a burst of commands costs a
// barrier per round trip, not one each, and an idle cluster or a lone
// node none.
func (n *Node) pushCommits() {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case <-n.applied:
		}
		if n.raft.State() != raft.Leader || len(n.fsm.Shared().Members) < 2 {
			continue // no follower to tell
		}
		if err := n.awaitRaft(context.Background(), n.raft.Barrier(n.opts.ElectionTimeout)); errors.Is(err, ErrClosed) {
			return
		} else if err != nil {
			n.log.Debug("commit index not pushed to the followers; they learn it at raft's next AppendEntries", "err", err)
		}
	}
}

// awaitRaft waits for a barrier's or a command's future, for ctx to end
// (its error), or for the node to close (ErrClosed). raft may never
// answer an entry it committed but had not applied when it shut down:
// such a future has no shutdown channel to end its wait. The goroutine
// left waiting then ends with the process.
func (n *Node) awaitRaft(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stop:
		return ErrClosed
	}
}

// appliedCommand wakes pushCommits; it never blocks the state machine.
func (n *Node) appliedCommand() {
	select {
	case n.applied <- struct{}{}:
	default:
	}
}
