package appliance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Fenced mode changes. A queue's mode is what its confirms promise:
// durable, synced by every required copy; buffered, written. Changing it
// on a live queue must leave no doubt about which confirm carries which
// promise, so every append takes the mode in effect when it is handed to
// the log (partition.dur, changed only with the partition's submitMu
// held), and its confirm names that mode.
//
//   - Durable to buffered: the fence is taken on every partition, the new
//     mode is recorded (the declaration), and only then are appends
//     handed over under the weaker rule. Appends in flight keep their
//     durable promise (in a cluster the gate counts their durable
//     copies: BoundaryWaiter).
//   - Buffered to durable: the fence closes admission at a boundary (each
//     partition's written end), each log is synced past it and its
//     durable frontier checked, the new mode is recorded, and admission
//     resumes under the stronger rule. Publishes waiting at the fence get
//     the stronger promise; confirms returned before keep their weaker
//     meaning. A sync that fails leaves the queue in its old mode and the
//     change failed, reported in the queue's info.
//
// A re-declare never changes a mode (ErrModeConflict); SetMode is the one
// way. On a cluster node the cluster drives a change (its control state
// records it, and the owner's copies must follow), so SetMode refuses it
// there and the cluster calls SetReplicatedMode on the queue's owner; the
// fence is the same, and each partition's gate switches with it
// (ModeSwitcher).

// ModeSwitcher is implemented by a ReplicaGate whose copies follow the
// partition's mode (a cluster's). SwitchMode is called with the
// partition fenced (nothing is handed to its log meanwhile), after the
// owner's log synced everything written when d is Durable; from then on
// the gate counts copies at d's boundary and the copies are asked to keep
// to d.
type ModeSwitcher interface {
	SwitchMode(d Durability)
}

// BoundaryWaiter is a ReplicaGate that can wait for durable copies
// whatever it counts now: a record appended under the durable rule keeps
// that promise (its confirm says durable) across a change to buffered.
type BoundaryWaiter interface {
	WaitDurable(stop <-chan struct{}, next uint64) error
}

// ErrModeChangePending: another mode change of the queue is in progress.
var ErrModeChangePending = fmt.Errorf("%w: a mode change of the queue is in progress", ErrConflict)

// ModeChange reports a queue's mode changes: the one in progress, if
// any, and the last that failed.
type ModeChange struct {
	Pending   bool       // a change is in progress
	To        Durability // the mode it moves to (when Pending)
	Since     time.Time  // when it started (when Pending)
	LastError string     // why the last change failed; "" if it did not
	FailedAt  time.Time  // when it failed
	Changed   time.Time  // when the mode in effect was last changed; zero if never since start
}

// modeState is a queue's mode change bookkeeping. change serialises
// changes (TryLock: a second one is refused, not queued); mu guards
// info.
type modeState struct {
	change sync.Mutex
	mu     sync.Mutex
	info   ModeChange
}

func (m *modeState) snapshot() ModeChange {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.info
}

func (m *modeState) update(f func(*ModeChange)) {
	m.mu.Lock()
	f(&m.info)
	m.mu.Unlock()
}

// SetMode changes a queue's durability mode, fenced as the comment above
// says, and returns the declaration in effect and whether it changed. The
// context bounds the syncs of a change to durable.
func (b *Broker) SetMode(ctx context.Context, name string, d Durability) (QueueConfig, bool, error) {
	if !b.solo() || b.opts.Replication != nil {
		return QueueConfig{}, false, fmt.Errorf("%w: on a cluster node a queue's mode changes through the cluster; queue %s keeps its mode",
			ErrInvalid, name)
	}
	return b.setMode(ctx, name, d)
}

// Mode is the mode in effect of queue name on this broker, without the
// cost of its full info.
func (b *Broker) Mode(name string) (Durability, error) {
	q, err := b.queue(name)
	if err != nil {
		return 0, err
	}
	return q.cfg().Durability, nil
}

// SetReplicatedMode is SetMode on a cluster node, for the cluster: it
// changes the mode of a queue this node owns, fenced, with each
// partition's gate switching inside the fence (ModeSwitcher). The cluster
// records the change in its control state, before the switch to buffered
// and once the copies are durable after a switch to durable.
func (b *Broker) SetReplicatedMode(ctx context.Context, name string, d Durability) (QueueConfig, bool, error) {
	return b.setMode(ctx, name, d)
}

func (b *Broker) setMode(ctx context.Context, name string, d Durability) (QueueConfig, bool, error) {
	if d != Durable && d != Buffered {
		return QueueConfig{}, false, fmt.Errorf("%w: mode must be durable or buffered", ErrInvalid)
	}
	q, err := b.queue(name)
	if err != nil {
		return QueueConfig{}, false, err
	}
	if !q.mode.change.TryLock() {
		return *q.cfg(), false, fmt.Errorf("%w: queue %s", ErrModeChangePending, name)
	}
	defer q.mode.change.Unlock()
	from := q.cfg().Durability
	if from == d {
		return *q.cfg(), false, nil
	}
	started := time.Now()
	q.mode.update(func(m *ModeChange) { m.Pending, m.To, m.Since = true, d, started })
	cfg, err := b.changeMode(ctx, q, d)
	q.mode.update(func(m *ModeChange) {
		m.Pending = false
		if err != nil {
			m.LastError, m.FailedAt = err.Error(), time.Now()
		} else {
			m.LastError, m.FailedAt, m.Changed = "", time.Time{}, time.Now()
		}
	})
	if err != nil {
		b.log.Warn("queue mode change failed; the queue keeps its mode", "queue", name, "from", from, "to", d, "err", err)
		return cfg, false, err
	}
	b.log.Info("queue mode changed", "queue", name, "from", from, "to", d, "took", time.Since(started))
	return cfg, true, nil
}

// changeMode fences the queue's partitions, makes the change and lifts
// the fence.
func (b *Broker) changeMode(ctx context.Context, q *queue, d Durability) (QueueConfig, error) {
	for _, p := range q.parts {
		p.submitMu.Lock()
		defer p.submitMu.Unlock()
	}
	if d == Durable {
		for _, p := range q.parts {
			if err := p.syncFence(ctx); err != nil {
				return *q.cfg(), err
			}
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.queues[q.cfg().Name] != q {
		return *q.cfg(), fmt.Errorf("%w: queue %s was deleted during its mode change", ErrNotFound, q.cfg().Name)
	}
	old := *q.cfg()
	next := old
	next.Durability = d
	if err := b.saveDeclaration(next); err != nil {
		if rerr := b.saveDeclaration(old); rerr != nil {
			b.log.Error("a failed mode change left the queue's declarations disagreeing", "queue", old.Name, "err", rerr)
		}
		return old, fmt.Errorf("%w: record the mode of queue %s: %w", ErrUnavailable, old.Name, err)
	}
	for _, p := range q.parts {
		if ms, ok := p.gate.(ModeSwitcher); ok {
			ms.SwitchMode(d)
		}
		p.dur.Store(uint32(appendBoundary(d)))
		if d == Buffered {
			p.syncSettles() // buffered appends are applied after them
		}
	}
	q.config.Store(&next)
	return next, nil
}

// syncFence makes everything the partition's log has written durable;
// submitMu is held, so nothing is handed to the log meanwhile.
func (p *partition) syncFence(ctx context.Context) error {
	to := p.log.WrittenNext()
	if err := p.log.Sync(ctx); err != nil {
		return fmt.Errorf("%w: queue %s partition %d: sync to offset %d before the change to durable: %w",
			unavailableOr(err), p.q.cfg().Name, p.idx, to, err)
	}
	if got := p.log.DurableNext(); got < to {
		return fmt.Errorf("%w: queue %s partition %d: durable to offset %d after the sync, written to %d",
			ErrUnavailable, p.q.cfg().Name, p.idx, got, to)
	}
	return nil
}

// unavailableOr is ErrUnavailable, or the context's error when the sync
// ran out of time.
func unavailableOr(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return ErrUnavailable
}
