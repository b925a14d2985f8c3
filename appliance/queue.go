package appliance

import (
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibril-edge/fibril/wal"
)

// Message is what a publisher sends.
type Message struct {
	ID      string // optional; deduplicated inside the queue's dedupe window
	Key     string // optional; picks the partition, so one key keeps its order
	Headers []Header
	Body    []byte
}

// Confirm says where a publish landed, at the queue's durability.
type Confirm struct {
	Queue      string
	Partition  int
	Offset     uint64
	Duplicate  bool // the id was seen inside the dedupe window; nothing new stored
	Durability Durability
}

// queue is a declared queue and its open partitions.
type queue struct {
	b *Broker
	// config is the declaration in effect. A re-declare replaces it while
	// partitions read it, so it is swapped whole, never changed in place.
	config atomic.Pointer[QueueConfig]
	parts  []*partition
	rr     atomic.Uint64

	subsMu sync.Mutex
	subs   map[*Subscription]struct{}

	dedupe *dedupeTable // message ids inside the dedupe window

	admit admission

	counters queueCounters
}

// admission holds what the queue's limits must count besides the applied
// state: publishes admitted but not applied yet, and drop-oldest discards
// appended but not applied yet. One mutex guards the check and the
// reservation, so concurrent publishers cannot both take the last room.
type admission struct {
	mu              sync.Mutex
	pubs, pubBytes  int64 // admitted, not yet applied or failed
	drops, dropSize int64 // discarded for room, not yet applied
	// changed, when set, closes at the next release: a drop-oldest
	// publish waiting for admitted publishes to become droppable.
	changed chan struct{}
}

// releasedLocked wakes the publishes waiting for a release; mu is held.
func (a *admission) releasedLocked() {
	if a.changed != nil {
		close(a.changed)
		a.changed = nil
	}
}

// admitWait bounds how long a drop-oldest publish waits for the publishes
// ahead of it to be applied, so that it can drop them, before it is
// refused as queue full.
const admitWait = 10 * time.Second

type queueCounters struct {
	published, duplicates, expired, discarded, deadLettered atomic.Int64
	rejectedFull, rejectedDisk, dropped, lostQuarantined    atomic.Int64
	delivered, redelivered, acked, requeued, rejected       atomic.Int64
}

func (q *queue) wakeAll() {
	for _, p := range q.parts {
		p.wake()
	}
}

func (q *queue) removeSub(s *Subscription) {
	q.subsMu.Lock()
	delete(q.subs, s)
	q.subsMu.Unlock()
	for _, p := range q.parts {
		p.removeSub(s)
	}
}

func (q *queue) pick(key string) *partition {
	if len(q.parts) == 1 {
		return q.parts[0]
	}
	if key != "" {
		h := fnv.New32a()
		h.Write([]byte(key))
		return q.parts[int(h.Sum32()%uint32(len(q.parts)))]
	}
	return q.parts[int(q.rr.Add(1)%uint64(len(q.parts)))]
}

// size sums the partitions' unsettled messages and bytes.
func (q *queue) size() (count, bytes int64) {
	for _, p := range q.parts {
		count += p.count.Load()
		bytes += p.bytes.Load()
	}
	return count, bytes
}

// publish runs a publish through dedupe, limits and the partition's batch.
func (q *queue) publish(m Message, now time.Time, done func(Confirm, error)) {
	p := q.pick(m.Key)
	if cfg := q.cfg(); m.ID != "" && cfg.DedupeWindow > 0 {
		e, dup := q.dedupe.lookup(m.ID, p.idx, now, cfg, func(part int, off uint64, err error) {
			if err != nil {
				done(Confirm{}, err)
				return
			}
			done(Confirm{Queue: cfg.Name, Partition: part, Offset: off, Duplicate: true, Durability: cfg.Durability}, nil)
		})
		if dup {
			q.counters.duplicates.Add(1)
			return
		}
		inner := done
		done = func(c Confirm, err error) {
			q.dedupe.complete(e, c.Offset, err)
			inner(c, err)
		}
	}
	size := storedSize(m.ID, m.Key, m.Headers, m.Body) // as the state counts it once applied
	reserved, err := q.makeRoom(p, size)
	if err != nil {
		done(Confirm{}, err)
		return
	}
	rec := publishRecord{At: now, MessageID: m.ID, Key: m.Key, Headers: m.Headers, Body: m.Body}
	p.publish(rec.recordType(), encodePublish(rec), func(res wal.AppendResult, err error) {
		if reserved {
			q.admitted(1, size) // applied (or failed): the state counts it now
		}
		if err != nil {
			done(Confirm{}, err)
			return
		}
		q.counters.published.Add(1)
		done(Confirm{Queue: q.cfg().Name, Partition: p.idx, Offset: res.First, Durability: q.cfg().Durability}, nil)
	})
}

// makeRoom applies the queue's limits and the broker's disk limits to a
// publish of n bytes headed for p. reserved says it took room under the
// queue's limits (a queue with none reserves nothing and takes no lock);
// the publish's completion gives it back (admitted).
func (q *queue) makeRoom(p *partition, n int64) (reserved bool, err error) {
	if err := q.b.checkDisk(n); err != nil {
		q.counters.rejectedDisk.Add(1)
		return false, err
	}
	if cfg := q.cfg(); cfg.MaxMessages <= 0 && cfg.MaxBytes <= 0 {
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

// admitWithin checks the queue's limits, counting what is admitted but not
// applied, and reserves room for one publish of n bytes; under
// drop-oldest it picks the messages to discard first. wait, when set,
// says that drop-oldest found nothing more ready to drop but publishes
// admitted or discards appended ahead of this one will change the count:
// it closes at the next such change, and the publish should try again.
func (q *queue) admitWithin(p *partition, n int64) (drops []roomDrop, wait <-chan struct{}, err error) {
	q.admit.mu.Lock()
	defer q.admit.mu.Unlock()
	count, bytes := q.size()
	count += q.admit.pubs - q.admit.drops
	bytes += q.admit.pubBytes - q.admit.dropSize
	over := func() bool {
		return (q.cfg().MaxMessages > 0 && count+1 > q.cfg().MaxMessages) ||
			(q.cfg().MaxBytes > 0 && bytes+n > q.cfg().MaxBytes)
	}
	if over() {
		if q.cfg().Overflow != OverflowDropOldest || (q.cfg().MaxBytes > 0 && n > q.cfg().MaxBytes) {
			q.counters.rejectedFull.Add(1)
			return nil, nil, fmt.Errorf("%w: queue %s holds %d messages, %d bytes (limits %d, %d)",
				ErrQueueFull, q.cfg().Name, count, bytes, q.cfg().MaxMessages, q.cfg().MaxBytes)
		}
		// Drop the oldest ready messages, starting with the target partition.
		for _, pp := range append([]*partition{p}, q.parts...) {
			for over() {
				off, size, ok := pp.takeOldest()
				if !ok {
					break
				}
				q.admit.drops, q.admit.dropSize = q.admit.drops+1, q.admit.dropSize+size
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
			return drops, nil, fmt.Errorf("%w: queue %s: nothing ready to drop", ErrQueueFull, q.cfg().Name)
		}
	}
	q.admit.pubs, q.admit.pubBytes = q.admit.pubs+1, q.admit.pubBytes+n
	return drops, nil, nil
}

// discardForRoom appends a drop-oldest discard. Its reservation goes right
// before the discard applies, so that the count never misses the message;
// for that instant it counts twice, which may drop one more but never
// lets the queue past its limit.
func (q *queue) discardForRoom(d roomDrop) {
	released := false // touched on the applier goroutine only, or by a failed submit
	release := func() {
		if !released {
			released = true
			q.dropped(1, d.size)
		}
	}
	d.p.submitThen(settleEntries(recDiscard, []uint64{d.off}), release, func(res wal.AppendResult, err error) {
		release() // the append failed: nothing to apply
		d.p.logSettleError(res, err)
	})
}

// admitted releases n admitted publishes of size bytes, once applied or
// failed.
func (q *queue) admitted(n, size int64) {
	q.admit.mu.Lock()
	q.admit.pubs, q.admit.pubBytes = q.admit.pubs-n, q.admit.pubBytes-size
	q.admit.releasedLocked()
	q.admit.mu.Unlock()
}

// dropped releases a drop-oldest discard once applied or failed.
func (q *queue) dropped(n, size int64) {
	q.admit.mu.Lock()
	q.admit.drops, q.admit.dropSize = q.admit.drops-n, q.admit.dropSize-size
	q.admit.releasedLocked()
	q.admit.mu.Unlock()
}

// cfg is the declaration in effect.
func (q *queue) cfg() *QueueConfig { return q.config.Load() }
