package appliance

import (
	"fmt"
	"sync"
	"time"
)

// Delivery is one message handed to a subscription. Its Tag settles it, on
// this subscription only.
type Delivery struct {
	Tag       uint64
	Queue     string
	Partition int
	Offset    uint64
	// Incarnation is the incarnation of the partition log the message was
	// written in (wal.Log.IncarnationAt): it stays the same across restarts
	// for as long as the message exists, and a message written later at
	// the same offset, after a cut, has another.
	Incarnation uint64
	Deliveries  uint32 // 1 on the first delivery
	MessageID   string
	Key         string // the key it was published with, if any
	Headers     []Header
	Body        []byte
	PublishedAt time.Time
}

// SubscribeOptions configure a subscription.
type SubscribeOptions struct {
	// Prefetch is the most unsettled deliveries the subscription holds.
	// Default 100.
	Prefetch int
	// Deliver receives each delivery, in offset order per partition. It is
	// called from the partitions' dispatchers, possibly concurrently for
	// different partitions, and must not block for long.
	Deliver func(Delivery)
	// Ended, if set, is called once when the broker ends the subscription
	// by itself: its queue was deleted, or this node stopped serving it
	// (the queue moved to another node of a cluster). Not called after
	// Close, nor when the broker closes. It must not block; no delivery
	// follows it.
	Ended func()
}

// DefaultPrefetch is the prefetch of a subscription that names none.
const DefaultPrefetch = 100

// Subscription is a consumer's hold on a queue.
type Subscription struct {
	q       *queue
	deliver func(Delivery)
	ended   func() // SubscribeOptions.Ended

	// mu guards credit, held, paused and closed: the subscription's own
	// state, shared by its partitions. A partition takes it with its own
	// mutex held (partition.mu before Subscription.mu), never the other
	// way.
	mu     sync.Mutex
	credit int
	held   map[uint64]*partition // tag -> partition holding its lease
	paused bool
	closed bool
}

// hasCredit reports whether takeCredit would succeed now.
func (s *Subscription) hasCredit() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.closed && !s.paused && s.credit > 0
}

// takeCredit reserves room for one delivery.
func (s *Subscription) takeCredit() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.paused || s.credit <= 0 {
		return false
	}
	s.credit--
	return true
}

func (s *Subscription) returnCredit() {
	s.mu.Lock()
	s.credit++
	s.mu.Unlock()
}

// hold records a lease; called with the partition's lock held.
func (s *Subscription) hold(tag uint64, p *partition) {
	s.mu.Lock()
	s.held[tag] = p
	s.mu.Unlock()
}

// release forgets a lease and returns its credit; called with the
// partition's lock held.
func (s *Subscription) release(tag uint64) {
	s.mu.Lock()
	if _, ok := s.held[tag]; ok {
		delete(s.held, tag)
		s.credit++
	}
	s.mu.Unlock()
	s.q.wakeAll()
}

func (s *Subscription) push(d Delivery) { s.deliver(d) }

// AddCredit lets the subscription hold n more unsettled deliveries.
func (s *Subscription) AddCredit(n int) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	s.credit += n
	s.mu.Unlock()
	s.q.wakeAll()
}

// Pause stops new deliveries to the subscription until Resume, whatever
// its credit: the partitions hand ready messages to other subscriptions
// instead. What it holds stays leased, and settles as usual. A delivery
// already being handed over when Pause is called still arrives.
func (s *Subscription) Pause() {
	s.mu.Lock()
	s.paused = true
	s.mu.Unlock()
}

// Resume undoes Pause.
func (s *Subscription) Resume() {
	s.mu.Lock()
	s.paused = false
	s.mu.Unlock()
	s.q.wakeAll()
}

// Ack settles deliveries as processed.
func (s *Subscription) Ack(tags ...uint64) error { return s.settle(tags, recAck) }

// Nack settles deliveries as not processed: with requeue they are delivered
// again (counting a delivery); without, they go to the dead-letter queue if
// one is declared, or are discarded.
func (s *Subscription) Nack(requeue bool, tags ...uint64) error {
	if requeue {
		return s.settle(tags, recRelease)
	}
	return s.settle(tags, recDiscard)
}

// NackDelay settles deliveries as not processed and requeues them after
// delay: they are not delivered again before it has passed, and are then
// requeued as Nack(true, ...) would have (counting a delivery, up to the
// queue's MaxDeliveries; the queue's Requeued counter counts it then). The subscription stops holding them at once: its
// credit comes back now. Until the delay is over the messages count as in
// flight, and Close leaves them waiting. The delay lives in memory only: a
// broker restart (or the queue moving to another node) makes them ready at
// once, as it does every lease. A delay of zero or less is Nack(true, ...).
func (s *Subscription) NackDelay(delay time.Duration, tags ...uint64) error {
	if delay <= 0 {
		return s.settle(tags, recRelease)
	}
	until := time.Now().Add(delay)
	return s.byPartition(tags, func(p *partition, ts []uint64) []uint64 { return p.delay(s, ts, until) })
}

// Extend resets the ack deadline of deliveries: each must now be settled
// within the queue's AckDeadline from now, or it is delivered again. A slow
// consumer calls it while it works on a message, so as not to lose it.
func (s *Subscription) Extend(tags ...uint64) error {
	until := time.Now().Add(s.q.cfg().AckDeadline)
	return s.byPartition(tags, func(p *partition, ts []uint64) []uint64 { return p.extend(s, ts, until) })
}

// StaleTagsError lists the tags a settle could not apply: unknown, stale,
// or held by another subscription. It matches ErrStaleTag.
type StaleTagsError struct {
	Tags []uint64
}

func (e *StaleTagsError) Error() string {
	return fmt.Sprintf("%v: %d tag(s), first %d", ErrStaleTag, len(e.Tags), e.Tags[0])
}

// Is makes errors.Is(err, ErrStaleTag) true.
func (e *StaleTagsError) Is(target error) bool { return target == ErrStaleTag }

// settle groups tags by partition. Unknown and stale tags are reported in a
// *StaleTagsError and never stop the others from settling.
func (s *Subscription) settle(tags []uint64, kind byte) error {
	return s.byPartition(tags, func(p *partition, ts []uint64) []uint64 { return p.settle(s, ts, kind) })
}

// byPartition hands tags to the partitions holding them, grouped. Unknown
// and stale tags are reported in a *StaleTagsError and never stop the
// others.
func (s *Subscription) byPartition(tags []uint64, each func(p *partition, tags []uint64) (stale []uint64)) error {
	byPart := make(map[*partition][]uint64)
	var stale []uint64
	s.mu.Lock()
	for _, tag := range tags {
		p, ok := s.held[tag]
		if !ok {
			stale = append(stale, tag)
			continue
		}
		byPart[p] = append(byPart[p], tag)
	}
	s.mu.Unlock()
	for p, ts := range byPart {
		stale = append(stale, each(p, ts)...)
	}
	if len(stale) > 0 {
		return &StaleTagsError{Tags: stale}
	}
	return nil
}

// Held is how many deliveries the subscription holds unsettled.
func (s *Subscription) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// Close ends the subscription; what it held unsettled becomes ready again
// without counting a delivery.
func (s *Subscription) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.q.removeSub(s)
}
