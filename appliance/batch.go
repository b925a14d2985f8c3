package appliance

import (
	"sync"
	"time"

	"github.com/fibril-edge/fibril/wal"
)

// Publish batching. Publishes to a partition gather in a pending batch that
// one append carries. The first publisher to find the partition idle
// (nothing pending, nothing being appended) appends its publish at once,
// on its own goroutine, and publishes arriving meanwhile form the next
// batch, which it appends next (leader-based group commit): no timer is on
// the path of a publish that finds the partition idle. In window mode, the
// default, the next batch goes as soon as the one before is appended. In
// gap mode, which buffered queues may be set to, a batch that gathered
// behind another goes once no publish arrived for the gap. A Publisher
// (publisher.go) holds the publishes one connection reads back to back
// and releases them together, so that they share one append.

// Limits of publish batching. One append carries at most maxPublishBatch
// publishes and maxBatchBytes of them (or a segment's fourth, if less), so
// no batch of valid publishes is larger than a segment takes. What waits
// to be appended is bounded at maxPendingBatches batches' worth: a
// publisher that finds it full waits, which holds back the connection it
// reads from, so a client sending fast is slowed, never refused.
const (
	maxPublishBatch   = 512
	maxBatchBytes     = 4 << 20
	maxPendingBatches = 4
)

// publishBatch is a partition's batch in the making. Its mutex guards every
// field; the goroutine that set flushing is the one appending.
type publishBatch struct {
	mu          sync.Mutex
	room        *sync.Cond // signalled when pending shrinks or closes
	pending     []pubReq
	pendingSize int64     // the pending records' bytes
	lastArrival time.Time // in gap mode
	lastLen     int       // publishes in the last batch taken: the next pending array's capacity
	flushTimer  *gapTimer // armed in gap mode while publishes wait
	flushing    bool      // a flusher is appending pending batches
	closed      bool      // the partition is closing: refuse publishes
}

type pubReq struct {
	typ  byte // recPublish or recPublishKeyed
	rec  []byte
	room reservation // what it holds in the queue's limits until applied
	// done runs once the publish is applied or failed, with the boundary
	// its append completed at: the promise its confirm carries.
	done func(wal.AppendResult, wal.Boundary, error)
}

// publish adds one encoded publish record, of type typ, holding room in
// the queue's limits, to the partition's batch. For a Publisher's publish
// (pub set), an append it would start at once is left to release, and
// publish reports that it is (a full batch goes at once all the same); pub
// is flushed before publish waits for room.
func (p *partition) publish(typ byte, rec []byte, room reservation, pub *Publisher, done func(wal.AppendResult, wal.Boundary, error)) (held bool) {
	gap := p.q.b.publishGap(p.q.cfg().Durability)
	hold := pub != nil
	p.batch.mu.Lock()
	if hold && !p.batch.closed && p.pendingFullLocked() {
		// What pub holds elsewhere must not wait for this partition.
		p.batch.mu.Unlock()
		pub.Flush()
		p.batch.mu.Lock()
	}
	for !p.batch.closed && p.pendingFullLocked() {
		p.batch.room.Wait()
	}
	if p.batch.closed {
		p.batch.mu.Unlock()
		p.unhold(&heldRoom{reservation: room})
		done(wal.AppendResult{}, p.boundary(), ErrClosed)
		return false
	}
	if p.batch.pending == nil { // the last batch took the array: start one its size
		p.batch.pending = make([]pubReq, 0, p.batch.lastLen)
	}
	p.batch.pending = append(p.batch.pending, pubReq{typ: typ, rec: rec, room: room, done: done})
	p.batch.pendingSize += int64(len(rec))
	// A publish that finds the partition idle goes at once, so a lone
	// publisher waits for no gap at all; a burst's later publishes
	// gather behind it.
	alone := len(p.batch.pending) == 1 && !p.batch.flushing && p.batch.flushTimer == nil
	if gap > 0 {
		p.batch.lastArrival = time.Now()
	}
	full := len(p.batch.pending) >= maxPublishBatch || p.batch.pendingSize >= p.batchBytes()
	switch {
	case hold && !full && !p.batch.flushing && p.batch.flushTimer == nil:
		p.batch.mu.Unlock()
		return true
	case gap <= 0 || full || alone:
		if p.batch.flushTimer != nil && p.batch.flushTimer.Stop() {
			p.batch.flushTimer = nil
		}
		if p.batch.flushing {
			p.batch.mu.Unlock()
			return false // the flusher in progress picks it up
		}
		p.batch.flushing = true
		p.batch.mu.Unlock()
		p.flushBatches()
	case p.batch.flushTimer == nil && !p.batch.flushing:
		p.batch.flushTimer = afterGap(gap, p.gapElapsed)
		p.batch.mu.Unlock()
	default:
		p.batch.mu.Unlock()
	}
	return false
}

// release starts the append of the publishes a Publisher held, unless a
// flusher or a gap timer has them already.
func (p *partition) release() {
	p.batch.mu.Lock()
	if p.batch.closed || len(p.batch.pending) == 0 || p.batch.flushing || p.batch.flushTimer != nil {
		p.batch.mu.Unlock()
		return
	}
	p.batch.flushing = true
	p.batch.mu.Unlock()
	p.flushBatches()
}

// gapElapsed flushes once the gap has passed since the last arrival, or
// waits out the rest of it.
func (p *partition) gapElapsed() {
	gap := p.q.b.publishGap(p.q.cfg().Durability)
	p.batch.mu.Lock()
	p.batch.flushTimer = nil
	if rest := gap - time.Since(p.batch.lastArrival); rest > 0 && len(p.batch.pending) < maxPublishBatch &&
		p.batch.pendingSize < p.batchBytes() {
		p.batch.flushTimer = afterGap(rest, p.gapElapsed)
		p.batch.mu.Unlock()
		return
	}
	if p.batch.flushing {
		p.batch.mu.Unlock()
		return
	}
	p.batch.flushing = true
	p.batch.mu.Unlock()
	p.flushBatches()
}

// batchBytes is the most record bytes one publish append carries.
func (p *partition) batchBytes() int64 { return min(maxBatchBytes, p.log.MaxBatchBytes()/4) }

// pendingFullLocked reports whether what waits to be appended is at its
// bound; called with batch.mu held.
func (p *partition) pendingFullLocked() bool {
	return len(p.batch.pending) >= maxPendingBatches*maxPublishBatch ||
		p.batch.pendingSize >= maxPendingBatches*p.batchBytes()
}

// takeBatchLocked takes the next batch off pending: at most
// maxPublishBatch publishes and batchBytes bytes, and at least one (a
// record alone over the byte cap goes alone; the log takes up to a
// segment). Called with batch.mu held.
func (p *partition) takeBatchLocked() []pubReq {
	n, size, limit := 0, int64(0), p.batchBytes()
	for n < len(p.batch.pending) && n < maxPublishBatch {
		r := int64(len(p.batch.pending[n].rec))
		if n > 0 && size+r > limit {
			break
		}
		size += r
		n++
	}
	batch := p.batch.pending[:n:n]
	p.batch.pending = p.batch.pending[n:]
	if len(p.batch.pending) == 0 {
		p.batch.pending = nil
	}
	if n > 0 {
		p.batch.lastLen = n
	}
	p.batch.pendingSize -= size
	p.batch.room.Broadcast()
	return batch
}

// flushBatches appends pending batches until none is left.
func (p *partition) flushBatches() { p.flushFrom(false, false) }

// flushFrom is flushBatches. While the partition may not write (a
// cluster's owner that waits for the cluster to install it: every
// restart of an owner goes through a recovery), the flush waits for it on
// a goroutine of its own, still marked as flushing: the publisher that
// started it is not held, and later publishes gather up to the pending
// bound, which then holds back the connections sending them. waited: that
// wait is over; the next batch is submitted as it is (a partition fenced
// meanwhile fails it). later: a batch was appended before this one.
func (p *partition) flushFrom(waited, later bool) {
	for ; ; later = true {
		wait := !waited && p.gate != nil && p.gate.Writable() != nil
		waited = false
		p.batch.mu.Lock()
		if later && p.gatherLocked() {
			p.batch.mu.Unlock()
			return
		}
		if wait && !p.batch.closed {
			p.wg.Add(1) // before close's Wait: closeBatches sets closed under batch.mu first
			p.batch.mu.Unlock()
			go func() {
				defer p.wg.Done()
				p.gate.AwaitWritable(p.closing)
				p.flushFrom(true, later)
			}()
			return
		}
		batch := p.takeBatchLocked()
		if len(batch) == 0 {
			p.batch.flushing = false
			p.batch.mu.Unlock()
			return
		}
		p.batch.mu.Unlock()
		if p.appendBatch(batch) {
			return
		}
	}
}

// appendBatch appends one batch of publishes for the flusher. When the
// append completed at once with nothing else waiting to be applied
// (handOver's own), the flusher applies it and runs its publishers'
// callbacks on its own goroutine, but as a flusher no more: it hands the
// role on first (to a goroutine of its own when more publishes wait), so
// a callback that publishes to the partition again never waits for
// itself. It reports whether the flusher's role ended.
func (p *partition) appendBatch(batch []pubReq) (ended bool) {
	entries := make([]wal.Entry, len(batch))
	var room reservation
	for i, r := range batch {
		entries[i] = wal.Entry{Type: r.typ, Payload: r.rec}
		room = room.plus(r.room)
	}
	var held *heldRoom
	if room != (reservation{}) {
		held = &heldRoom{reservation: room}
	}
	at := new(wal.Boundary)
	pa := pendingAppend{entries: entries, room: held, done: func(res wal.AppendResult, err error) {
		for i, r := range batch {
			r.done(wal.AppendResult{First: res.First + uint64(i), Next: res.First + uint64(i) + 1}, *at, err)
		}
	}}
	own, err := p.handOver(&pa, at, true)
	if err != nil {
		p.failHandOver(pa, err)
		return false
	}
	if !own {
		return false
	}
	p.batch.mu.Lock()
	more := len(p.batch.pending) > 0 && !p.batch.closed
	if more {
		p.wg.Add(1) // before close's Wait: closeBatches sets closed under batch.mu first
		go func() {
			defer p.wg.Done()
			p.flushFrom(false, true)
		}()
	} else {
		p.batch.flushing = false
	}
	p.batch.mu.Unlock()
	p.applyOwn(pa)
	return true
}

// gatherLocked, in gap mode, hands a batch that gathered while the one
// before was appended to the gap timer while publishes still arrive within
// the gap and it has room: the flush ends, and gapElapsed goes on with it.
// Called with batch.mu held by the flusher.
func (p *partition) gatherLocked() bool {
	gap := p.q.b.publishGap(p.q.cfg().Durability)
	if gap <= 0 || len(p.batch.pending) == 0 || p.batch.closed || len(p.batch.pending) >= maxPublishBatch ||
		p.batch.pendingSize >= p.batchBytes() {
		return false
	}
	rest := gap - time.Since(p.batch.lastArrival)
	if rest <= 0 {
		return false
	}
	p.batch.flushing = false
	if p.batch.flushTimer == nil { // an armed one calls gapElapsed already
		p.batch.flushTimer = afterGap(rest, p.gapElapsed)
	}
	return true
}

// closeBatches refuses further publishes and fails what is pending.
func (p *partition) closeBatches() {
	p.batch.mu.Lock()
	p.batch.closed = true
	if p.batch.flushTimer != nil {
		p.batch.flushTimer.Stop()
		p.batch.flushTimer = nil
	}
	pending := p.batch.pending
	p.batch.pending, p.batch.pendingSize = nil, 0
	p.batch.room.Broadcast()
	p.batch.mu.Unlock()
	for _, r := range pending {
		p.unhold(&heldRoom{reservation: r.room})
		r.done(wal.AppendResult{}, p.boundary(), ErrClosed)
	}
}
