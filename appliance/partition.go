package appliance

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibril-edge/fibril/wal"
)

// partition runs one partition: its log, the state applied from it, the
// leases its subscriptions hold, and a dispatcher goroutine that hands ready
// messages out in offset order.
//
// Every change goes through the log first: an event is appended at the
// queue's durability and applied only once the append completes, by the
// applier goroutine, in log order.
type partition struct {
	q    *queue
	idx  int
	log  *wal.Log
	dur  wal.Boundary
	gate ReplicaGate // nil: solo

	submitMu sync.Mutex // serialises hand-off to the log so the applier sees offset order
	applyCh  chan pendingAppend

	mu          sync.Mutex // guards the fields below
	st          *partitionState
	leases      map[uint64]*lease // by delivery tag
	expiry      leaseHeap
	subs        []*Subscription
	rr          int
	dedupe      []dedupeRecord // recent message ids, for snapshots
	quarantined []quarantineRecord

	batch publishBatch // publishes gathering for one append; its own mutex (batch.go)

	ckptMu    sync.Mutex // one checkpoint of this partition at a time; guards logClosed
	logClosed bool       // set by queue.close: later checkpoints find nothing to do

	count, bytes atomic.Int64 // mirrors st.count and st.bytes for lock-free limit checks
	dirty        atomic.Bool  // applied since the last checkpoint

	kick      chan struct{}
	closing   chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

type pendingAppend struct {
	c       *wal.Completion
	entries []wal.Entry
	done    func(wal.AppendResult, error) // after apply, on the applier goroutine
}

type lease struct {
	tag      uint64
	sub      *Subscription
	offset   uint64
	deadline time.Time
	index    int // in the expiry heap
}

type dedupeRecord struct {
	ID     string
	Offset uint64
	At     time.Time
}

func openPartition(q *queue, idx int, log *wal.Log, st *partitionState, gate ReplicaGate) *partition {
	p := &partition{
		q: q, idx: idx, log: log, st: st, gate: gate,
		dur:     wal.AfterFsync,
		applyCh: make(chan pendingAppend, 1024),
		leases:  make(map[uint64]*lease),
		kick:    make(chan struct{}, 1),
		closing: make(chan struct{}),
	}
	if q.cfg().Durability == Buffered {
		p.dur = wal.AfterFlush
	}
	p.count.Store(st.count)
	p.bytes.Store(st.bytes)
	p.wg.Add(2)
	go p.runApplier()
	go p.runDispatcher()
	return p
}

// read reads one record at the partition's delivery boundary: written for a
// buffered queue, durable for a durable one.
func (p *partition) read(offset uint64) (wal.Record, error) {
	var recs []wal.Record
	var err error
	if p.dur == wal.AfterFlush {
		recs, err = p.log.ReadWritten(offset, 1)
	} else {
		recs, err = p.log.ReadDurable(offset, 1)
	}
	if err != nil {
		return wal.Record{}, err
	}
	if len(recs) == 0 || recs[0].Offset != offset {
		return wal.Record{}, fmt.Errorf("record %d not readable", offset)
	}
	return recs[0], nil
}

// submit appends entries at the partition's durability; done runs after
// they are applied (or failed).
func (p *partition) submit(entries []wal.Entry, done func(wal.AppendResult, error)) {
	p.submitMu.Lock()
	defer p.submitMu.Unlock()
	select {
	case <-p.closing:
		if done != nil {
			done(wal.AppendResult{}, ErrClosed)
		}
		return
	default:
	}
	c := p.log.AppendAsync(entries, p.dur)
	select {
	case p.applyCh <- pendingAppend{c: c, entries: entries, done: done}:
	case <-p.closing:
		// The applier may be held at the replica gate with the channel
		// full; closing ends that wait. What this append wrote is applied
		// when the log is replayed at the next open.
		if done != nil {
			done(wal.AppendResult{}, ErrClosed)
		}
	}
}

func (p *partition) runApplier() {
	defer p.wg.Done()
	for pa := range p.applyCh {
		<-pa.c.Done()
		res, err := pa.c.Result()
		switch {
		case err == nil && p.gate != nil:
			if err = p.gate.Wait(p.closing, res.Next); err != nil {
				err = fmt.Errorf("%w: queue %s partition %d: not enough copies: %w", ErrUnavailable, p.q.cfg().Name, p.idx, err)
				break
			}
			err = p.apply(res.First, pa.entries)
		case err == nil:
			err = p.apply(res.First, pa.entries)
		case errors.Is(err, wal.ErrNoSpace): // nothing written, the log stays healthy
			if len(pa.entries) > 0 && pa.entries[0].Type == recPublish {
				p.q.counters.rejectedDisk.Add(1)
			}
			err = fmt.Errorf("%w: queue %s partition %d: %w", ErrDiskFull, p.q.cfg().Name, p.idx, err)
		case errors.Is(err, wal.ErrTooLarge): // past what a segment holds; nothing written
			err = fmt.Errorf("%w: queue %s partition %d: %w", ErrTooLarge, p.q.cfg().Name, p.idx, err)
		default:
			err = fmt.Errorf("%w: queue %s partition %d: %w", ErrUnavailable, p.q.cfg().Name, p.idx, err)
		}
		if pa.done != nil {
			pa.done(res, err)
		}
	}
}

// apply applies records that completed at the queue's durability.
func (p *partition) apply(first uint64, entries []wal.Entry) error {
	var over []uint64
	p.mu.Lock()
	for i, e := range entries {
		off := first + uint64(i)
		eff, err := p.st.apply(wal.Record{Offset: off, Type: e.Type, Payload: e.Payload}, p.q.cfg().MaxDeliveries)
		if err != nil {
			p.mu.Unlock()
			return fmt.Errorf("queue %s partition %d: %w", p.q.cfg().Name, p.idx, err)
		}
		switch eff {
		case effectOverLimit: // the record settles an earlier message: dead-letter that one
			target, _ := decodeSettle(e.Payload) // apply decoded it already
			over = append(over, target)
		case effectReady:
			if e.Type == recPublish {
				p.rememberLocked(off)
			}
		}
	}
	p.count.Store(p.st.count)
	p.bytes.Store(p.st.bytes)
	p.mu.Unlock()
	p.dirty.Store(true)
	p.q.b.markDirty(p)
	p.wake()
	if len(over) > 0 {
		p.q.b.bg.Go(func() { p.deadLetter(over, "max-deliveries") })
	}
	return nil
}

// rememberLocked keeps a published message id for the dedupe window.
func (p *partition) rememberLocked(off uint64) {
	m := p.st.msgs[off]
	window := p.q.cfg().DedupeWindow
	if m == nil || m.id == "" || window <= 0 {
		return
	}
	p.dedupe = append(p.dedupe, dedupeRecord{ID: m.id, Offset: off, At: m.at})
	n := 0
	for n < len(p.dedupe) && m.at.Sub(p.dedupe[n].At) > window {
		n++
	}
	p.dedupe = p.dedupe[n:]
}

func (p *partition) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// runDispatcher leases ready messages to subscriptions with credit and
// expires leases past their deadline. Its timer is armed only while leases
// are held, so an idle partition does not wake.
func (p *partition) runDispatcher() {
	defer p.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-p.kick:
		case <-timer.C:
		case <-p.closing:
			timer.Stop()
			return
		}
		now := time.Now()
		p.expire(now)
		for _, d := range p.leaseReady(now) {
			p.deliver(d)
		}
		p.mu.Lock()
		if len(p.expiry) > 0 {
			timer.Reset(time.Until(p.expiry[0].deadline))
		}
		p.mu.Unlock()
	}
}

type dispatch struct {
	sub        *Subscription
	tag        uint64
	offset     uint64
	deliveries uint32
}

// leaseReady pairs ready messages with subscriptions that have credit,
// round robin, lowest offset first.
func (p *partition) leaseReady(now time.Time) []dispatch {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []dispatch
	for len(p.subs) > 0 {
		progressed := false
		for range p.subs {
			sub := p.subs[p.rr%len(p.subs)]
			p.rr++
			if !sub.takeCredit() {
				continue
			}
			m := p.st.nextReady()
			if m == nil {
				sub.returnCredit()
				return out
			}
			l := &lease{tag: p.q.b.nextTag.Add(1), sub: sub, offset: m.offset, deadline: now.Add(p.q.cfg().AckDeadline)}
			p.leases[l.tag] = l
			heap.Push(&p.expiry, l)
			sub.hold(l.tag, p)
			out = append(out, dispatch{sub: sub, tag: l.tag, offset: m.offset, deliveries: m.deliveries + 1})
			progressed = true
		}
		if !progressed {
			break
		}
	}
	return out
}

// deliver reads a leased message's body and hands it to its subscription.
func (p *partition) deliver(d dispatch) {
	rec, err := p.read(d.offset)
	var pub publishRecord
	if err == nil {
		pub, err = decodePublish(rec.Payload)
	}
	if err != nil && p.quarantineLive(err) {
		return
	}
	if err != nil {
		// Leave it leased: the lease expires and it is tried again.
		p.q.b.log.Error("cannot read message for delivery", "queue", p.q.cfg().Name,
			"partition", p.idx, "offset", d.offset, "err", err)
		return
	}
	d.sub.push(Delivery{
		Tag: d.tag, Queue: p.q.cfg().Name, Partition: p.idx, Offset: d.offset,
		Deliveries: d.deliveries, MessageID: pub.MessageID, Headers: pub.Headers,
		Body: pub.Body, PublishedAt: pub.At,
	})
	if obs := p.q.b.opts.Observer; obs != nil {
		obs.Delivered(p.q.cfg().Name, p.q.cfg().Durability, d.deliveries, time.Since(pub.At))
	}
}

// expire ends leases past their deadline: the message is released with one
// more delivery counted, through the log.
func (p *partition) expire(now time.Time) {
	p.mu.Lock()
	var offs []uint64
	for len(p.expiry) > 0 && !p.expiry[0].deadline.After(now) {
		l := p.expiry[0]
		p.dropLeaseLocked(l)
		if m := p.st.msgs[l.offset]; m != nil {
			m.status = msgSettling
		}
		offs = append(offs, l.offset)
	}
	p.mu.Unlock()
	if len(offs) > 0 {
		p.q.counters.expired.Add(int64(len(offs)))
		p.submit(settleEntries(recExpire, offs), p.logSettleError)
	}
}

// dropLeaseLocked forgets a lease and gives its subscription the credit back.
func (p *partition) dropLeaseLocked(l *lease) {
	delete(p.leases, l.tag)
	heap.Remove(&p.expiry, l.index)
	l.sub.release(l.tag)
}

// settle applies a consumer's decision on tags it holds on this partition.
// It returns the tags this subscription does not hold here.
func (p *partition) settle(sub *Subscription, tags []uint64, kind byte) (stale []uint64) {
	var offs []uint64
	p.mu.Lock()
	for _, tag := range tags {
		l, ok := p.leases[tag]
		if !ok || l.sub != sub {
			stale = append(stale, tag)
			continue
		}
		p.dropLeaseLocked(l)
		if m := p.st.msgs[l.offset]; m != nil {
			m.status = msgSettling
		}
		offs = append(offs, l.offset)
	}
	p.mu.Unlock()
	if len(offs) == 0 {
		return stale
	}
	switch {
	case kind == recDiscard && p.q.cfg().DeadLetter != "":
		p.q.b.bg.Go(func() { p.deadLetter(offs, "rejected") })
	case kind == recDiscard:
		p.q.counters.discarded.Add(int64(len(offs)))
		p.submit(settleEntries(kind, offs), p.logSettleError)
	default:
		p.submit(settleEntries(kind, offs), p.logSettleError)
	}
	p.wake()
	return stale
}

func settleEntries(kind byte, offs []uint64) []wal.Entry {
	es := make([]wal.Entry, len(offs))
	for i, off := range offs {
		es[i] = wal.Entry{Type: kind, Payload: encodeSettle(off)}
	}
	return es
}

func (p *partition) logSettleError(_ wal.AppendResult, err error) {
	if err != nil {
		p.q.b.log.Error("settle not recorded", "queue", p.q.cfg().Name, "partition", p.idx, "err", err)
	}
}

// deadLetter copies messages to the dead-letter queue (under that queue's
// own mode), then settles them here with a dead-letter marker. Without a
// dead-letter queue they are discarded. A copy that fails leaves the
// message ready here.
func (p *partition) deadLetter(offs []uint64, reason string) {
	dlq := p.q.cfg().DeadLetter
	var settled []uint64
	for _, off := range offs {
		if dlq == "" {
			settled = append(settled, off)
			continue
		}
		rec, err := p.read(off)
		var pub publishRecord
		if err == nil {
			pub, err = decodePublish(rec.Payload)
		}
		if err == nil {
			headers := append(append([]Header(nil), pub.Headers...),
				Header{Key: "fibril-dead-letter-reason", Value: reason},
				Header{Key: "fibril-dead-letter-queue", Value: p.q.cfg().Name},
				Header{Key: "fibril-dead-letter-offset", Value: fmt.Sprintf("%d/%d", p.idx, off)})
			_, err = p.q.b.publishDeadLetter(dlq, Message{ID: pub.MessageID, Headers: headers, Body: pub.Body})
		}
		if err != nil {
			p.q.b.log.Error("dead-letter copy failed; message stays ready", "queue", p.q.cfg().Name,
				"dead_letter", dlq, "offset", off, "err", err)
			p.mu.Lock()
			p.st.unlease(off)
			p.mu.Unlock()
			p.wake()
			continue
		}
		settled = append(settled, off)
	}
	if len(settled) == 0 {
		return
	}
	kind := recDeadLetter
	if dlq == "" {
		kind = recDiscard
		p.q.counters.discarded.Add(int64(len(settled)))
	} else {
		p.q.counters.deadLettered.Add(int64(len(settled)))
	}
	p.submit(settleEntries(kind, settled), p.logSettleError)
}

// addSub and removeSub attach a subscription; removing one returns its
// leases to ready without counting a delivery.
func (p *partition) addSub(s *Subscription) {
	p.mu.Lock()
	p.subs = append(p.subs, s)
	p.mu.Unlock()
	p.wake()
}

func (p *partition) removeSub(s *Subscription) {
	p.mu.Lock()
	for i, x := range p.subs {
		if x == s {
			p.subs = append(p.subs[:i], p.subs[i+1:]...)
			break
		}
	}
	for _, l := range p.leases {
		if l.sub == s {
			p.dropLeaseLocked(l)
			p.st.unlease(l.offset)
		}
	}
	p.mu.Unlock()
	p.wake()
}

// takeOldest marks the oldest ready message as settling, for drop-oldest.
func (p *partition) takeOldest() (uint64, int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.st.oldestReady()
	if m == nil {
		return 0, 0, false
	}
	m.status = msgSettling
	return m.offset, m.size, true
}

// close stops the goroutines once every append handed over is applied.
func (p *partition) close() {
	p.closeBatches()
	first := false
	// closing first, without submitMu: a submit holding it may be blocked
	// on a full applyCh while the applier waits at the replica gate, and
	// closing releases both.
	p.closeOnce.Do(func() { close(p.closing); first = true })
	if !first {
		return
	}
	p.submitMu.Lock()
	close(p.applyCh)
	p.submitMu.Unlock()
	p.wg.Wait()
	if p.gate != nil {
		p.gate.Detach()
	}
}

// sync makes everything appended so far durable.
func (p *partition) sync(ctx context.Context) error { return p.log.Sync(ctx) }

type leaseHeap []*lease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *leaseHeap) Push(x any) {
	l := x.(*lease)
	l.index = len(*h)
	*h = append(*h, l)
}
func (h *leaseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.index = -1
	return l
}
