package appliance

import (
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
// applier goroutine, in log order. The decisions about leases and dispatch
// are made by core (lease.go), which does no I/O; the methods here take
// the lock, ask the core, and carry out what it returns.
//
// Each piece of mutable state has one owner, named by the comment on its
// group. Lock order: the queue's admission mutex, then ckptMu, then mu,
// then Subscription.mu or the queue's dedupe table; mu is never taken with
// submitMu or batch.mu held.
type partition struct {
	// Set at open, never changed. The log is safe for concurrent use.
	q    *queue
	idx  int
	log  *wal.Log
	gate ReplicaGate // nil: solo
	held *heldDedupe // the ids of the records replayHeld applies (its own once started)

	// submitMu orders appends with their hand-off on applyCh, so the
	// applier sees them in offset order; it guards sending on applyCh and
	// closing it. The applier goroutine owns the receiving side.
	submitMu sync.Mutex
	applyCh  chan pendingAppend
	// marker is the record the records replayHeld holds wait for, once
	// appended; markerSent, made at open when they wait for one (nil
	// else), is closed once it is handed to the applier. The marker is
	// the first append once the partition is writable, made by whichever
	// submit comes first: replayHeld runs on the applier, so a marker
	// queued behind a full applyCh would never be sent, and a publisher
	// blocked on the full channel holds submitMu.
	marker     *wal.Completion
	markerSent chan struct{}
	// applying is held by whoever applies appends: the applier goroutine
	// for each one it takes (and for the held replay), or a publish batch
	// applied on its submitter's goroutine (handOver). inflight counts the
	// appends handed over and not applied yet; it rises under submitMu.
	applying sync.Mutex
	inflight atomic.Int64
	// dur is the boundary appends complete at (a wal.Boundary): the
	// queue's mode. Changed only with submitMu held (mode.go), so every
	// append takes the boundary in effect when it was handed over.
	dur atomic.Uint32

	// mu guards the partition's state: what is applied, leased and
	// remembered. The applier changes it by applying records, the
	// dispatcher and settling callers by asking the core.
	mu          sync.Mutex
	core        dispatchCore[*Subscription] // the applied state, leases and subscriptions
	quarantined []quarantineRecord
	dirty       bool // applied since the last checkpoint

	// count and bytes mirror core.st.count and core.st.bytes: written only
	// under mu, read anywhere.
	count, bytes atomic.Int64
	// room is what the queue's limits count besides the applied state:
	// publishes admitted and drop-oldest discards taken, not applied yet.
	// Guarded by mu, so that an apply moves a message from room to the
	// state in one step; admitCount and admitBytes mirror the sum for the
	// queue's limit checks (admission.go).
	room                   reservation
	admitCount, admitBytes atomic.Int64

	batch publishBatch // publishes gathering for one append; its own mutex (batch.go)

	ckptMu    sync.Mutex // held across one checkpoint of this partition; guards logClosed
	logClosed bool       // set by queue.close: later checkpoints find nothing to do

	// Signals. kick wakes the dispatcher, which owns its timer; closing is
	// closed once, by close.
	kick      chan struct{}
	closing   chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup // the applier and the dispatcher
}

type pendingAppend struct {
	c       *wal.Completion
	entries []wal.Entry
	room    *heldRoom                     // the room its records hold in the queue's limits; may be nil
	done    func(wal.AppendResult, error) // after apply, on the applier goroutine
	dur     wal.Boundary                  // the mode's boundary when handed over: what its confirm promises
}

type dedupeRecord struct {
	ID     string
	Offset uint64
	At     time.Time
}

// applyDepth is how many appends a partition holds between the log and
// its applier. A channel's buffer is allocated whole when it is made, so
// the depth is paid by every partition, idle or not: at 1,024 it was 48 KiB
// each, half the memory of a thousand idle queues. An append holds a
// batch of publishes, and a full channel only makes the next submit wait
// for the applier.
const applyDepth = 128

// openPartition starts a partition on its rebuilt state.
func openPartition(q *queue, idx int, log *wal.Log, rp *replayer, gate ReplicaGate) *partition {
	p := &partition{
		q: q, idx: idx, log: log, gate: gate,
		applyCh:     make(chan pendingAppend, applyDepth),
		core:        newDispatchCore[*Subscription](rp.st),
		quarantined: rp.quarantined,
		kick:        make(chan struct{}, 1),
		closing:     make(chan struct{}),
	}
	p.dur.Store(uint32(appendBoundary(q.cfg().Durability)))
	p.batch.room = sync.NewCond(&p.batch.mu)
	p.mirrorLocked() // not shared yet
	heldTo := rp.st.appliedNext
	if rp.held {
		heldTo = log.WrittenNext() // what the replay left for the gate
	}
	// Their ids are in the dedupe window before anyone can publish: a
	// publish retried across a failover is a duplicate of one of them.
	p.held = p.heldIDs(rp.st.appliedNext, heldTo)
	if gate != nil && rp.st.appliedNext < heldTo { // not shared yet
		p.markerSent = make(chan struct{})
	}
	// The held records are applied first: applying is taken before any
	// publish can find it free and apply a later append on its own
	// goroutine (handOver), and only when there are some, so that a
	// partition with none is free to do so at once.
	replay := rp.st.appliedNext < heldTo
	if replay {
		p.applying.Lock()
	}
	p.wg.Add(2)
	go func() {
		if replay {
			p.replayHeld(heldTo)
			p.applying.Unlock()
		} else {
			p.held.fail()
		}
		p.runApplier()
	}()
	go p.runDispatcher()
	return p
}

// read reads one record at the partition's delivery boundary: written for a
// buffered queue, durable for a durable one.
func (p *partition) read(offset uint64) (wal.Record, error) {
	var recs []wal.Record
	var err error
	if p.boundary() == wal.AfterFlush {
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

// boundary is the boundary appends complete at now: the queue's mode.
func (p *partition) boundary() wal.Boundary { return wal.Boundary(p.dur.Load()) }

// submit appends entries at the partition's durability; done runs after
// they are applied (or failed).
func (p *partition) submit(entries []wal.Entry, done func(wal.AppendResult, error)) {
	p.submitHolding(entries, nil, nil, done)
}

// submitHolding is submit for records that hold room in the queue's
// limits: the apply takes the room over, and a failed append gives it
// back before done runs. at, when set, receives the boundary the append
// completes at before done can run.
func (p *partition) submitHolding(entries []wal.Entry, room *heldRoom, at *wal.Boundary, done func(wal.AppendResult, error)) {
	pa := pendingAppend{entries: entries, room: room, done: done}
	if _, err := p.handOver(&pa, at, false); err != nil {
		p.failHandOver(pa, err)
	}
}

// failHandOver ends an append handOver refused: its room goes back and
// its done hears why.
func (p *partition) failHandOver(pa pendingAppend, err error) {
	p.unhold(pa.room) // after submitMu: mu is never taken with it held
	if pa.done != nil {
		pa.done(wal.AppendResult{}, err)
	}
}

// applyOwn applies an append handOver left to its caller (own), then lets
// the appends handed over after it apply.
func (p *partition) applyOwn(pa pendingAppend) {
	defer func() {
		p.applying.Unlock()
		p.inflight.Add(-1)
		p.wg.Done()
	}()
	p.applyOne(pa)
}

// handOver appends pa's entries and hands them to the applier, in offset
// order, under submitMu; an error says nothing was handed over. When
// mayApply is set and the append completed at once (a buffered append
// the log wrote on this goroutine) with nothing else waiting to be
// applied, on a solo partition, it hands them to no one: it returns own,
// holding applying, and the caller applies them (applyOne) on its own
// goroutine, so a lone publish crosses no goroutine before its confirm.
// Appends handed over later wait for applying.
func (p *partition) handOver(pa *pendingAppend, at *wal.Boundary, mayApply bool) (own bool, err error) {
	p.submitMu.Lock()
	defer p.submitMu.Unlock()
	dur := p.boundary()
	if at != nil {
		*at = dur
	}
	select {
	case <-p.closing:
		return false, ErrClosed
	default:
	}
	if p.gate != nil {
		if err := p.gate.Writable(); err != nil {
			return false, err
		}
		p.appendMarkerLocked()
	}
	pa.dur = dur
	pa.c = p.log.AppendAsync(pa.entries, p.boundaryFor(dur, pa.entries))
	if mayApply && p.gate == nil && p.inflight.Load() == 0 && completed(pa.c) && p.applying.TryLock() {
		p.inflight.Add(1)
		p.wg.Add(1) // under submitMu, before close's Wait
		return true, nil
	}
	p.inflight.Add(1)
	select {
	case p.applyCh <- *pa:
		return false, nil
	default:
		// The applier may be waiting for settles that wait for the next
		// sync (boundaryFor), with a channel full of more of them.
		p.syncSettles()
	}
	select {
	case p.applyCh <- *pa:
		return false, nil
	case <-p.closing:
		// The applier may be held at the replica gate with the channel
		// full; closing ends that wait. What this append wrote is applied
		// when the log is replayed at the next open.
		p.inflight.Add(-1)
		return false, ErrClosed
	}
}

// boundaryFor is the boundary entries are appended at on a partition
// whose appends complete at dur. On a solo durable partition, the settles
// that end a message (acks, discards, dead-letter markers) are applied
// once durable as ever, but ask for no sync of their own: the next
// publish's sync or the background sync covers them. One lost in a power
// cut costs no promise (its message is delivered again, as when the cut
// comes before the ack reaches the log), and an ack no longer rewrites
// the log's last page by itself: at 1k/s it halves the bytes written per
// message. Requeues and expiries make a message ready again when applied,
// so they keep their own sync; so does a replicated partition, whose
// followers sync each record they are sent, and a queue with limits: an
// acked message counts against them until its ack applies, so a publish
// would be refused, or drop-oldest would drop a message nobody read in its
// place. (Limits added to a queue later sync the settles that wait:
// Declare.)
func (p *partition) boundaryFor(dur wal.Boundary, entries []wal.Entry) wal.Boundary {
	if dur != wal.AfterFsync || p.gate != nil || p.q.cfg().hasLimits() {
		return dur
	}
	for _, e := range entries {
		switch e.Type {
		case recAck, recDiscard, recDeadLetter:
		default:
			return dur
		}
	}
	return wal.AfterNextFsync
}

// syncSettles asks the partition's log to sync the settles waiting for
// the next sync (boundaryFor) now, for a caller that waits for them to
// apply: a purge, a close, a change to buffered and a full channel to the
// applier (the applier takes appends in order).
func (p *partition) syncSettles() { p.log.SyncSoon() }

// completed reports whether c's append is done.
func completed(c *wal.Completion) bool {
	select {
	case <-c.Done():
		return true
	default:
		return false
	}
}

// appendMarker returns the offset of the marker replayHeld's records wait
// for, once its append completed. A goroutine of its own appends it unless
// a submit did: replayHeld runs on the applier, which must not wait for
// submitMu (a submit may hold it while it waits for the applier).
func (p *partition) appendMarker() (uint64, error) {
	select {
	case <-p.closing:
		return 0, ErrClosed
	default:
	}
	if p.markerSent == nil {
		return 0, errors.New("no recovered records wait for a marker")
	}
	errc := make(chan error, 1)
	p.wg.Add(1) // the applier, which calls this, is counted: Close waits
	go func() {
		defer p.wg.Done()
		p.submitMu.Lock()
		defer p.submitMu.Unlock()
		select {
		case <-p.closing:
			// close may have closed applyCh already (it takes submitMu
			// after closing): a send could pick the closed channel.
			errc <- ErrClosed
			return
		default:
		}
		if err := p.gate.Writable(); err != nil {
			errc <- err
			return
		}
		p.appendMarkerLocked()
		errc <- nil
	}()
	select {
	case <-p.markerSent:
	case err := <-errc:
		if err != nil {
			return 0, err
		}
	case <-p.closing:
		return 0, ErrClosed
	}
	c := p.marker // written before markerSent closed
	select {
	case <-c.Done():
	case <-p.closing:
		return 0, ErrClosed
	}
	res, err := c.Result()
	return res.First, err
}

// appendMarkerLocked appends the marker when one is due and not appended
// yet, and hands it to the applier, which applies it after the records
// replayHeld applies, like any append since the open. It is the first
// append since the open (nothing is appended before the partition is
// writable), so applyCh has room. submitMu is held, the partition is
// writable and not closing.
func (p *partition) appendMarkerLocked() {
	if p.markerSent == nil || p.marker != nil {
		return
	}
	entries := []wal.Entry{{Type: recMarker}}
	p.marker = p.log.AppendAsync(entries, p.boundary())
	p.inflight.Add(1)
	p.applyCh <- pendingAppend{c: p.marker, entries: entries}
	close(p.markerSent)
}

// heldDedupe are the message ids of records held for the replica gate
// at open: a publish retried with one of their ids while they wait (a
// client whose confirm a failover lost) is a duplicate, answered once the
// record is applied.
type heldDedupe struct {
	q       *queue
	idx     int
	entries map[uint64]heldID // by offset
}

type heldID struct {
	id string
	e  *dedupeEntry
}

// heldIDs registers the ids of the records in [from, to) in the queue's
// dedupe window, pending until they are applied.
func (p *partition) heldIDs(from, to uint64) *heldDedupe {
	h := &heldDedupe{q: p.q, idx: p.idx, entries: map[uint64]heldID{}}
	if p.q.cfg().DedupeWindow <= 0 {
		return h
	}
	for from < to {
		recs, err := p.log.ReadWritten(from, 4<<20)
		if err != nil || len(recs) == 0 {
			return h // the replay reports it
		}
		for _, r := range recs {
			if r.Offset >= to {
				break
			}
			if !isPublish(r.Type) {
				continue
			}
			pr, err := decodePublish(r.Type, r.Payload)
			if err != nil || pr.MessageID == "" {
				continue
			}
			if e, ok := p.q.dedupe.hold(pr.MessageID, p.idx, pr.At, p.q.cfg().dedupeBounds()); ok {
				h.entries[r.Offset] = heldID{id: pr.MessageID, e: e}
			}
		}
		from = recs[len(recs)-1].Offset + 1
	}
	return h
}

// applied completes the ids of the records below next.
func (h *heldDedupe) applied(next uint64) {
	for off, hid := range h.entries {
		if off < next {
			h.q.dedupe.complete(hid.e, off, nil)
			delete(h.entries, off)
		}
	}
}

// fail forgets the ids of records not applied.
func (h *heldDedupe) fail() {
	for off, hid := range h.entries {
		h.q.dedupe.complete(hid.e, 0, fmt.Errorf("%w: the partition closed before the record was confirmed", ErrUnavailable))
		delete(h.entries, off)
	}
}

// replayHeld applies, on the applier goroutine and before anything
// appended since the open, the records a replicated partition's replay
// left for its gate: the log may hold records written but never past the
// gate (never confirmed), so none is applied, delivered or counted until
// enough copies hold it. A solo partition's replay applied everything.
func (p *partition) replayHeld(to uint64) {
	p.mu.Lock()
	from := p.core.st.appliedNext
	p.mu.Unlock()
	if from >= to {
		p.held.fail()
		return
	}
	held := p.held
	defer held.fail()  // what was not applied: its retries publish anew
	if p.gate != nil { // the cluster may give a partition none
		// The records recovered here may be an older epoch's that a
		// later recovery could still cut away, even once enough copies
		// hold them (raft's rule: count only the current term's
		// entries). So they are applied only once a record of this
		// owner's own epoch, written after them, is on enough copies:
		// every such copy holds them and ends in the newest epoch.
		if err := p.gate.Wait(p.closing, 0); err != nil { // installed: writable
			return
		}
		marker, err := p.appendMarker()
		if err != nil {
			p.q.b.log.Error("the partition cannot write the marker its recovered records wait for",
				"queue", p.q.cfg().Name, "partition", p.idx, "err", err)
			return
		}
		if err := p.gate.Wait(p.closing, max(to, marker+1)); err != nil {
			return // closing: the next open replays them again
		}
	}
	for from < to {
		recs, err := p.log.ReadWritten(from, 4<<20)
		if hole, ok := p.quarantineLive(err); ok {
			p.mu.Lock()
			p.core.st.appliedNext = max(p.core.st.appliedNext, hole.To)
			from = p.core.st.appliedNext
			p.mu.Unlock()
			continue
		}
		if err == nil && len(recs) == 0 {
			err = errors.New("read nothing below the written frontier")
		}
		if err == nil { // one apply per read: the records come in offset order, without gaps
			entries := make([]wal.Entry, 0, len(recs))
			for _, r := range recs {
				if r.Offset >= to {
					break
				}
				entries = append(entries, wal.Entry{Type: r.Type, Payload: r.Payload})
			}
			err = p.apply(from, entries, nil)
			from += uint64(len(entries))
			held.applied(from)
		}
		if err != nil {
			p.q.b.log.Error("replay of the records held for the replica gate failed; the partition cannot apply",
				"queue", p.q.cfg().Name, "partition", p.idx, "offset", from, "err", err)
			return
		}
	}
}

func (p *partition) runApplier() {
	defer p.wg.Done()
	for pa := range p.applyCh {
		p.applying.Lock()
		p.applyOne(pa)
		p.applying.Unlock()
		p.inflight.Add(-1)
	}
}

// applyOne applies one append handed over once it completed (and, on a
// replicated partition, passed the gate), then runs its done. applying
// is held.
func (p *partition) applyOne(pa pendingAppend) {
	<-pa.c.Done()
	res, err := pa.c.Result()
	switch {
	case err == nil && p.gate != nil:
		if bw, ok := p.gate.(BoundaryWaiter); ok && pa.dur == wal.AfterFsync {
			err = bw.WaitDurable(p.closing, res.Next) // durable as handed over, whatever the mode now
		} else {
			err = p.gate.Wait(p.closing, res.Next)
		}
		if err != nil {
			err = fmt.Errorf("%w: queue %s partition %d: not enough copies: %w", ErrUnavailable, p.q.cfg().Name, p.idx, err)
			break
		}
		err = p.apply(res.First, pa.entries, pa.room)
	case err == nil:
		err = p.apply(res.First, pa.entries, pa.room)
	case errors.Is(err, wal.ErrNoSpace) && p.gate == nil && settlesOnly(pa.entries):
		// A full disk must not keep a consumer's decision from taking
		// effect, or no checkpoint could pass the message and no space
		// would ever be freed (reserve.go): the settle applies in
		// memory, the next checkpoint records it, and a crash before
		// that redelivers the message (at least once).
		err = p.applyUnlogged(pa.entries, pa.room)
	case errors.Is(err, wal.ErrNoSpace): // nothing written, the log stays healthy
		if len(pa.entries) > 0 && isPublish(pa.entries[0].Type) {
			p.q.counters.rejectedDisk.Add(1)
		}
		err = fmt.Errorf("%w: queue %s partition %d: %w", ErrDiskFull, p.q.cfg().Name, p.idx, err)
	case errors.Is(err, wal.ErrTooLarge): // past what a segment holds; nothing written
		err = fmt.Errorf("%w: queue %s partition %d: %w", ErrTooLarge, p.q.cfg().Name, p.idx, err)
	default:
		err = fmt.Errorf("%w: queue %s partition %d: %w", ErrUnavailable, p.q.cfg().Name, p.idx, err)
	}
	p.unhold(pa.room) // not applied: the room goes back
	if pa.done != nil {
		pa.done(res, err)
	}
}

// settlesOnly reports whether entries settle messages and publish none.
func settlesOnly(entries []wal.Entry) bool {
	for _, e := range entries {
		if isPublish(e.Type) || e.Type == recMarker {
			return false
		}
	}
	return len(entries) > 0
}

// apply applies records that completed at the queue's durability; room,
// when set, is what they held in the queue's limits.
func (p *partition) apply(first uint64, entries []wal.Entry, room *heldRoom) error {
	return p.applyEach(first, entries, room, func(r wal.Record) (applyEffect, error) {
		return p.core.st.apply(r, p.q.cfg().MaxDeliveries)
	})
}

// applyUnlogged applies settles whose records the log had no room for
// (a full disk): in memory, outside the log's order, for the next
// checkpoint to record.
func (p *partition) applyUnlogged(entries []wal.Entry, room *heldRoom) error {
	return p.applyEach(0, entries, room, func(r wal.Record) (applyEffect, error) {
		return p.core.st.settleRecord(r, p.q.cfg().MaxDeliveries)
	})
}

// applyEach applies entries, the first at offset first, with one. The
// room they held goes in the same step, so the limits never count a
// message twice or not at all.
func (p *partition) applyEach(first uint64, entries []wal.Entry, room *heldRoom, one func(wal.Record) (applyEffect, error)) error {
	var over []uint64
	p.mu.Lock()
	p.unholdLocked(room)
	for i, e := range entries {
		off := first + uint64(i)
		eff, err := one(wal.Record{Offset: off, Type: e.Type, Payload: e.Payload})
		if err != nil {
			p.mirrorLocked()
			p.mu.Unlock()
			return fmt.Errorf("queue %s partition %d: %w", p.q.cfg().Name, p.idx, err)
		}
		switch eff {
		case effectOverLimit: // the record settles an earlier message: dead-letter that one
			target, _ := decodeSettle(e.Payload) // apply decoded it already
			over = append(over, target)
		case effectReady:
			if isPublish(e.Type) {
				p.rememberLocked(off)
			}
		}
	}
	p.mirrorLocked()
	p.dirty = true
	p.mu.Unlock()
	p.q.b.markDirty(p)
	p.wake()
	if len(over) > 0 {
		p.q.b.bg.Go(func() { p.deadLetter(over, "max-deliveries") })
	}
	return nil
}

// mirrorLocked publishes the state's size, and with the room held the
// limits' count, to the lock-free mirrors.
func (p *partition) mirrorLocked() {
	p.count.Store(p.core.st.count)
	p.bytes.Store(p.core.st.bytes)
	p.admitCount.Store(p.core.st.count + p.room.pubs - p.room.drops)
	p.admitBytes.Store(p.core.st.bytes + p.room.pubBytes - p.room.dropBytes)
}

// rememberLocked marks a published message id stored in the queue's
// dedupe table; the message keeps no copy of its id.
func (p *partition) rememberLocked(off uint64) {
	m := p.core.st.msgs.get(off)
	if m == nil || m.id == "" {
		return
	}
	if cfg := p.q.cfg(); cfg.DedupeWindow > 0 {
		p.q.dedupe.remember(m.id, p.idx, off, m.at, cfg.dedupeBounds())
	}
	m.id = "" // the table keeps its own copy, within its bounds
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
		next, ok := p.core.nextDeadline()
		p.mu.Unlock()
		if ok {
			timer.Reset(time.Until(next))
		}
	}
}

// leaseReady leases what the core dispatches and records each lease with
// its subscription.
func (p *partition) leaseReady(now time.Time) []dispatch[*Subscription] {
	p.mu.Lock()
	defer p.mu.Unlock()
	ds := p.core.dispatch(now, p.q.cfg().AckDeadline, func() uint64 { return p.q.b.nextTag.Add(1) })
	for _, d := range ds {
		d.sub.hold(d.tag, p)
	}
	return ds
}

// deliver reads a leased message's body and hands it to its subscription.
func (p *partition) deliver(d dispatch[*Subscription]) {
	rec, err := p.read(d.offset)
	var pub publishRecord
	if err == nil {
		pub, err = decodePublish(rec.Type, rec.Payload)
	}
	if _, ok := p.quarantineLive(err); err != nil && ok {
		return
	}
	if err != nil {
		// Leave it leased: the lease expires and it is tried again.
		p.q.b.log.Error("cannot read message for delivery", "queue", p.q.cfg().Name,
			"partition", p.idx, "offset", d.offset, "err", err)
		return
	}
	d.sub.push(Delivery{
		Tag: d.tag, Queue: p.q.cfg().Name, Partition: p.idx, Offset: d.offset, Incarnation: p.log.IncarnationAt(d.offset),
		Deliveries: d.deliveries, MessageID: pub.MessageID, Key: pub.Key, Headers: pub.Headers,
		Body: pub.Body, PublishedAt: pub.At,
	})
	p.q.counters.delivered.Add(1)
	if d.deliveries > 1 {
		p.q.counters.redelivered.Add(1)
	}
	if obs := p.q.b.opts.Observer; obs != nil {
		obs.Delivered(p.q.cfg().Name, p.q.cfg().Durability, d.deliveries, time.Since(pub.At))
	}
}

// expire ends leases past their deadline: the message is released with one
// more delivery counted, through the log. A delayed nack's lease ends the
// same way but is recorded as the requeue it is.
func (p *partition) expire(now time.Time) {
	p.mu.Lock()
	expired, delayed := p.core.expire(now)
	p.releaseLocked(expired)
	p.mu.Unlock()
	if len(expired) > 0 {
		p.q.counters.expired.Add(int64(len(expired)))
		p.submit(settleEntries(recExpire, leaseOffsets(expired)), p.logSettleError)
	}
	if len(delayed) > 0 {
		p.q.counters.requeued.Add(int64(len(delayed)))
		p.submit(settleEntries(recRelease, leaseOffsets(delayed)), p.logSettleError)
	}
}

// releaseLocked gives the credit of ended leases back to their
// subscriptions. A delayed lease gave its credit back when it was delayed.
func (p *partition) releaseLocked(ended []*lease[*Subscription]) {
	for _, l := range ended {
		if !l.delayed {
			l.sub.release(l.tag)
		}
	}
}

// addSub and removeSub attach a subscription; removing one returns its
// leases to ready without counting a delivery.
func (p *partition) addSub(s *Subscription) {
	p.mu.Lock()
	p.core.addSub(s)
	p.mu.Unlock()
	p.wake()
}

func (p *partition) removeSub(s *Subscription) {
	p.mu.Lock()
	p.releaseLocked(p.core.removeSub(s))
	p.mu.Unlock()
	p.wake()
}

// takeOldest marks the oldest ready message as settling, for drop-oldest.
func (p *partition) takeOldest() (uint64, int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.core.st.oldestReady()
	if m == nil {
		return 0, 0, false
	}
	m.status = msgSettling
	p.room.drops, p.room.dropBytes = p.room.drops+1, p.room.dropBytes+m.size
	p.mirrorLocked()
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
	p.syncSettles() // the applier waits for them
	p.wg.Wait()
	if p.gate != nil {
		p.gate.Detach()
	}
}

// sync makes everything appended so far durable.
func (p *partition) sync(ctx context.Context) error { return p.log.Sync(ctx) }
