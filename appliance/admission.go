package appliance

import (
	"fmt"
	"sync"
	"time"

	"github.com/fibril-edge/fibril/wal"
)

// Admission: a queue's limits (max_messages, max_bytes) count the applied
// state and the room held by what is on its way to it: publishes admitted
// and drop-oldest discards taken, not applied yet. Each partition keeps
// its held room under its own mutex, beside the state, and an apply moves
// a message from the one to the other in the same step, so the count a
// publisher checks is never off by a message in flight: reject lets in
// exactly the room, drop-oldest drops exactly what the limit asks.

// admission orders the queue's limit checks. One mutex guards the check
// and the reservation, so concurrent publishers cannot both take the last
// room; pubs and drops say whether anything held will still change the
// count (a drop-oldest publish waits for that instead of being refused).
type admission struct {
	mu          sync.Mutex
	pubs, drops int64 // held by publishes and discards not applied or failed yet
	// changed, when set, closes at the next release: a drop-oldest
	// publish waiting for admitted publishes to become droppable.
	changed chan struct{}
}

// admitWait bounds how long a drop-oldest publish waits for the publishes
// ahead of it to be applied, so that it can drop them, before it is
// refused as queue full.
const admitWait = 10 * time.Second

// reservation is room held in a partition's count for its queue's limits.
type reservation struct {
	pubs, pubBytes   int64 // publishes admitted, not applied
	drops, dropBytes int64 // discards taken for room, not applied
}

func (r reservation) plus(o reservation) reservation {
	return reservation{r.pubs + o.pubs, r.pubBytes + o.pubBytes, r.drops + o.drops, r.dropBytes + o.dropBytes}
}

func (r reservation) minus(o reservation) reservation {
	return reservation{r.pubs - o.pubs, r.pubBytes - o.pubBytes, r.drops - o.drops, r.dropBytes - o.dropBytes}
}

// heldRoom is the room one append's records hold until they apply or
// fail, whichever comes first gives it back. Only the goroutine handling
// the append touches it: the submitter until the hand-off, then the
// applier.
type heldRoom struct {
	reservation
	given bool
}

// unhold gives back room that was not applied.
func (p *partition) unhold(h *heldRoom) {
	if h == nil || h.given {
		return
	}
	p.mu.Lock()
	p.unholdLocked(h)
	p.mirrorLocked()
	p.mu.Unlock()
}

// unholdLocked gives back h's room; mu is held. An apply calls it in the
// step that adds the records to the state, and mirrors the sum once
// both are done: a reader never sees the one without the other.
func (p *partition) unholdLocked(h *heldRoom) {
	if h == nil || h.given {
		return
	}
	h.given = true
	p.room = p.room.minus(h.reservation)
}

// reserve holds room for a publish admitted to p.
func (p *partition) reserve(r reservation) {
	p.mu.Lock()
	p.room = p.room.plus(r)
	p.mirrorLocked()
	p.mu.Unlock()
}

// admitSize sums the partitions' counts for the limits: applied, plus
// admitted, less taken for drops.
func (q *queue) admitSize() (count, bytes int64) {
	for _, p := range q.parts {
		count += p.admitCount.Load()
		bytes += p.admitBytes.Load()
	}
	return count, bytes
}

// makeRoom applies the queue's limits and the broker's disk limits to a
// publish of n bytes headed for p. reserved says it took room under the
// queue's limits (a queue with none reserves nothing and takes no lock);
// the publish holds it until applied, and its completion tells the
// queue (admitted).
func (q *queue) makeRoom(p *partition, n int64) (reserved bool, err error) {
	if err := q.b.checkDisk(n); err != nil {
		q.counters.rejectedDisk.Add(1)
		return false, err
	}
	if !q.cfg().hasLimits() {
		return false, nil // no limits: nothing to count, nothing to reserve
	}
	var deadline <-chan time.Time
	for {
		drops, wait, err := q.admitWithin(p, n)
		// The discards are appended after the admission lock is let go:
		// an append may wait for the applier, whose completions take the
		// lock.
		for _, d := range drops {
			q.discardForRoom(d)
		}
		if wait == nil {
			return err == nil, err
		}
		// Drop-oldest with the room held by publishes not applied yet:
		// they become droppable once applied. The publisher waits (a
		// connection stops reading), it is not refused for being fast.
		if deadline == nil {
			t := time.NewTimer(admitWait)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-wait:
		case <-p.closing:
			return false, ErrClosed
		case <-deadline:
			q.counters.rejectedFull.Add(1)
			return false, fmt.Errorf("%w: queue %s: nothing ready to drop for %v", ErrQueueFull, q.cfg().Name, admitWait)
		}
	}
}

// roomDrop is a message drop-oldest discards to make room.
type roomDrop struct {
	p    *partition
	off  uint64
	size int64
}

// admitWithin checks the queue's limits and reserves room for one publish
// of n bytes in p; under drop-oldest it picks the messages to discard
// first. wait, when set, says that drop-oldest found nothing more ready
// to drop but publishes admitted or discards taken ahead of this one will
// change the count: it closes at the next such change, and the publish
// should try again.
func (q *queue) admitWithin(p *partition, n int64) (drops []roomDrop, wait <-chan struct{}, err error) {
	q.admit.mu.Lock()
	defer q.admit.mu.Unlock()
	cfg := q.cfg()
	count, bytes := q.admitSize()
	over := func() bool {
		return (cfg.MaxMessages > 0 && count+1 > cfg.MaxMessages) ||
			(cfg.MaxBytes > 0 && bytes+n > cfg.MaxBytes)
	}
	if over() {
		if cfg.Overflow != OverflowDropOldest || (cfg.MaxBytes > 0 && n > cfg.MaxBytes) {
			q.counters.rejectedFull.Add(1)
			return nil, nil, fmt.Errorf("%w: queue %s holds %d messages, %d bytes (limits %d, %d)",
				ErrQueueFull, cfg.Name, count, bytes, cfg.MaxMessages, cfg.MaxBytes)
		}
		// Drop the oldest ready messages, starting with the target partition.
		for _, pp := range append([]*partition{p}, q.parts...) {
			for over() {
				off, size, ok := pp.takeOldest()
				if !ok {
					break
				}
				q.admit.drops++
				drops = append(drops, roomDrop{p: pp, off: off, size: size})
				q.counters.dropped.Add(1)
				count--
				bytes -= size
			}
		}
		if over() && (q.admit.pubs > 0 || q.admit.drops > 0) {
			if q.admit.changed == nil {
				q.admit.changed = make(chan struct{})
			}
			return drops, q.admit.changed, nil
		}
		if over() {
			q.counters.rejectedFull.Add(1)
			return drops, nil, fmt.Errorf("%w: queue %s: nothing ready to drop", ErrQueueFull, cfg.Name)
		}
	}
	q.admit.pubs++
	p.reserve(reservation{pubs: 1, pubBytes: n})
	return drops, nil, nil
}

// discardForRoom appends a drop-oldest discard; the room it took (takeOldest)
// goes as it applies.
func (q *queue) discardForRoom(d roomDrop) {
	room := &heldRoom{reservation: reservation{drops: 1, dropBytes: d.size}}
	d.p.submitHolding(settleEntries(recDiscard, []uint64{d.off}), room, nil, func(res wal.AppendResult, err error) {
		q.released(0, 1)
		d.p.logSettleError(res, err)
	})
}

// admitted tells the queue that an admitted publish was applied or failed.
func (q *queue) admitted() { q.released(1, 0) }

// released counts publishes and discards that no longer hold room, and
// wakes the publishes waiting for that.
func (q *queue) released(pubs, drops int64) {
	q.admit.mu.Lock()
	q.admit.pubs -= pubs
	q.admit.drops -= drops
	if q.admit.changed != nil {
		close(q.admit.changed)
		q.admit.changed = nil
	}
	q.admit.mu.Unlock()
}
