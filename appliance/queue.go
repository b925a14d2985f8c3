package appliance

import (
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

	mode modeState // mode changes (mode.go)

	admit admission

	counters queueCounters
}

type queueCounters struct {
	published, duplicates, expired, discarded, deadLettered   atomic.Int64
	rejectedFull, rejectedDisk, dropped, lostQuarantined      atomic.Int64
	delivered, redelivered, acked, requeued, rejected, purged atomic.Int64
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

// publish runs a publish through dedupe, limits and the partition's batch,
// holding its append for pub when it is set.
func (q *queue) publish(m Message, now time.Time, done func(Confirm, error), pub *Publisher) {
	p := q.pick(m.Key)
	cfg := q.cfg()
	if pub != nil && cfg.hasLimits() {
		pub.Flush() // admission may wait for what pub holds to be applied
		pub = nil
	}
	if m.ID != "" && cfg.DedupeWindow > 0 {
		e, dup := q.dedupe.lookup(m.ID, p.idx, now, cfg, func(part int, off uint64, err error) {
			if err != nil {
				done(Confirm{}, err)
				return
			}
			// The mode now, not when the duplicate came: the original
			// may have been appended after a change to buffered, and a
			// change to durable syncs all appended before it.
			done(Confirm{Queue: cfg.Name, Partition: part, Offset: off, Duplicate: true, Durability: q.cfg().Durability}, nil)
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
	var room reservation
	if reserved {
		room = reservation{pubs: 1, pubBytes: size}
		if pub != nil { // limits declared since cfg was read: others' admissions wait for it
			pub.Flush()
			pub = nil
		}
	}
	rec := publishRecord{At: now, MessageID: m.ID, Key: m.Key, Headers: m.Headers, Body: m.Body}
	held := p.publish(rec.recordType(), encodePublish(rec), room, pub, func(res wal.AppendResult, at wal.Boundary, err error) {
		if reserved {
			q.admitted() // applied (or failed): the state counts it now
		}
		if err != nil {
			done(Confirm{}, err)
			return
		}
		q.counters.published.Add(1)
		// The mode the append completed under, which a mode change
		// (mode.go) may have changed since the publish arrived.
		done(Confirm{Queue: q.cfg().Name, Partition: p.idx, Offset: res.First, Durability: durabilityOf(at)}, nil)
	})
	if held {
		pub.hold(p)
	}
}

// cfg is the declaration in effect.
func (q *queue) cfg() *QueueConfig { return q.config.Load() }
