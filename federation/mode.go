package federation

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/server"
	"github.com/fibril-edge/fibril/federation/control"
)

// Mode changes in a cluster (control/mode.go has the two commands). Any
// node asks for a change (SetMode); the queue's owner carries it out
// (runMode), with the broker's fence (appliance.Broker.SetReplicatedMode)
// and each partition's gate and streams switching inside it
// (ownedPartition.SwitchMode):
//
//   - To buffered: the change is put in effect in the control state
//     first; only then does the owner admit publishes under the weaker
//     rule. Earlier confirms were durable anyway.
//   - To durable: the owner fences its partitions, syncs its logs, and
//     from then on confirms only what the policy's count of copies holds
//     durable; followers sync what they hold and every later batch. The
//     change is put in effect once every partition's required copies hold
//     durable everything written before the fence. Until then it stays
//     pending, and so it does while a follower is down or failing: the
//     count is never lowered, and publishes wait for durable copies.
//
// A new owner after a failover finds a pending change in the control
// state and carries it out again, so a change is never half applied.
// The owner also brings a queue whose broker mode differs from the mode
// in effect (a restart between recording a change to buffered and making
// it) in line.

// modeWait bounds how long SetMode waits for a change to take effect
// before it answers that the change is pending.
const modeWait = 5 * time.Second

// SetMode asks for the mode of queue name to change to d, cluster-wide,
// through any node, and waits up to modeWait (or ctx) for the change to
// take effect. It returns the queue's declaration and whether the change
// is still pending (carried on by the queue's owner). A different change
// already pending is appliance.ErrModeChangePending.
func (c *Cluster) SetMode(ctx context.Context, name string, d appliance.Durability) (control.Queue, bool, error) {
	if c.isLocal(name) {
		b := c.boundBroker()
		if b == nil {
			return control.Queue{}, false, appliance.ErrUnavailable
		}
		cfg, _, err := b.SetReplicatedMode(ctx, name, d) // unreplicated: the solo rules
		return control.Queue{Config: cfg}, false, err
	}
	r := c.node.proposeSeen(ctx, control.Command{Op: control.OpSetMode,
		Mode: &control.SetMode{Queue: name, To: d, Since: time.Now().UnixNano()}})
	if r.Err != nil {
		return r.Queue, false, fmt.Errorf("change the mode of queue %s: %w", name, r.Err)
	}
	c.kickModes()
	wctx, cancel := context.WithTimeout(ctx, modeWait)
	defer cancel()
	// In effect here: this node has applied the proposal (proposeSeen).
	inEffect := func(q control.Queue) bool { return q.Config.Durability == d && q.ModeChange == nil }
	_ = c.node.waitFor(wctx, func(s *control.State) bool {
		q, ok := s.Queues[name]
		return !ok || inEffect(q)
	})
	var q control.Queue
	var ok bool
	c.node.read(func(s *control.State) { q, ok = s.Queues[name] })
	if !ok {
		return control.Queue{}, false, fmt.Errorf("%w: %s", control.ErrUnknownQueue, name)
	}
	return q, !inEffect(q), nil
}

var _ server.ModeChanger = (*Cluster)(nil)

// ChangeMode is SetMode for the client protocol's server.
func (c *Cluster) ChangeMode(ctx context.Context, queue string, d appliance.Durability) (appliance.QueueConfig, bool, error) {
	q, pending, err := c.SetMode(ctx, queue, d)
	return q.Config, pending, err
}

// kickModes wakes watchModes.
func (c *Cluster) kickModes() {
	select {
	case c.modeKick <- struct{}{}:
	default:
	}
}

// watchModes starts a runMode for every queue this node serves whose
// mode is to change (a pending change, or the broker's mode differing
// from the one in effect), at start and after every applied command.
func (c *Cluster) watchModes() {
	defer c.wg.Done()
	select {
	case <-c.node.Replayed():
	case <-c.stop:
		return
	}
	for {
		changed := c.node.Changed()
		if b := c.boundBroker(); b != nil {
			st := c.node.shared()
			for name, q := range st.Queues {
				if !st.OwnedBy(name, c.node.opts.ID) || !c.serving(name) {
					continue
				}
				want := q.Config.Durability
				if q.ModeChange != nil {
					want = q.ModeChange.To
				}
				mode, err := b.Mode(name)
				if err != nil || (q.ModeChange == nil && mode == want) {
					continue
				}
				c.startMode(name, want)
			}
		}
		select {
		case <-changed:
		case <-c.modeKick:
		case <-c.stop:
			return
		}
	}
}

// startMode runs runMode for queue in the background unless one runs.
func (c *Cluster) startMode(queue string, to appliance.Durability) {
	c.modeMu.Lock()
	defer c.modeMu.Unlock()
	if c.modeRuns[queue] {
		return
	}
	c.modeRuns[queue] = true
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() {
			c.modeMu.Lock()
			delete(c.modeRuns, queue)
			c.modeMu.Unlock()
			c.kickModes() // look again: the state may have moved on meanwhile
		}()
		for {
			err := c.runMode(queue, to)
			if err == nil || errors.Is(err, errModeMovedOn) {
				return
			}
			c.log.Warn("queue mode change not done yet; retrying", "queue", queue, "to", to, "err", err)
			select {
			case <-time.After(time.Second):
			case <-c.stop:
				return
			}
		}
	}()
}

// errModeMovedOn: the change runMode works on is no longer this node's to
// make (done, replaced, the queue moved or was deleted).
var errModeMovedOn = errors.New("the mode change moved on")

// runMode carries out, on the queue's owner, the change of queue to to
// (see above): a pending change, or bringing the broker in line with the
// mode in effect.
func (c *Cluster) runMode(queue string, to appliance.Durability) error {
	b := c.boundBroker()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	var q control.Queue
	owned := false
	c.node.read(func(s *control.State) {
		q = s.Queues[queue]
		owned = s.OwnedBy(queue, c.node.opts.ID)
	})
	pending := q.ModeChange != nil && q.ModeChange.To == to
	if !owned || b == nil || (!pending && q.Config.Durability != to) {
		return errModeMovedOn
	}
	if !pending { // in effect already: the broker follows
		_, _, err := b.SetReplicatedMode(ctx, queue, to)
		return err
	}
	if to == appliance.Buffered {
		if err := c.applyMode(ctx, queue, to); err != nil {
			return err
		}
		_, _, err := b.SetReplicatedMode(ctx, queue, to)
		return err
	}
	if _, _, err := b.SetReplicatedMode(ctx, queue, to); err != nil {
		return err
	}
	if err := c.awaitDurableCopies(ctx, queue); err != nil {
		return err
	}
	return c.applyMode(ctx, queue, to)
}

// applyMode puts the pending change of queue to to in effect.
func (c *Cluster) applyMode(ctx context.Context, queue string, to appliance.Durability) error {
	r := c.node.propose(ctx, control.Command{Op: control.OpSetMode, Mode: &control.SetMode{Queue: queue, To: to, Applied: true}})
	if r.Err != nil {
		return fmt.Errorf("put the change of queue %s to %s in effect: %w", queue, to, r.Err)
	}
	c.log.Info("queue mode changed in the cluster", "queue", queue, "to", to)
	return nil
}

// awaitDurableCopies waits until every partition of queue this node owns
// has, on the copies its policy counts, everything its log has written
// now durable: the gates count durable copies once the switch made them
// (SwitchMode), so this is their ceiling reaching the written end. It
// ends early once the queue is no longer this node's (errModeMovedOn).
func (c *Cluster) awaitDurableCopies(ctx context.Context, queue string) error {
	c.mu.Lock()
	var ops []*ownedPartition
	for _, op := range c.owned {
		if op.queue == queue {
			ops = append(ops, op)
		}
	}
	c.mu.Unlock()
	for _, op := range ops {
		target := op.log.WrittenNext()
		for {
			g := op.currentGate()
			if g == nil {
				return errModeMovedOn
			}
			changed := g.Changed()
			if g.Ceiling() >= target {
				break
			}
			select {
			case <-changed:
			case <-op.fencedCh:
				return errModeMovedOn
			case <-op.done:
				return errModeMovedOn
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}
