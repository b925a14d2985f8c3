package appliance

import (
	"sync"
	"time"

	"github.com/fibril-edge/fibril/wal"
)

// Publish batching. Publishes to a partition gather in a pending batch that
// one append carries. In window mode the first publisher to find no batch
// in progress appends whatever is pending at once, and publishes arriving
// meanwhile form the next batch (the log's own group write does the rest).
// In gap mode, used by buffered queues by default, the batch ends once no
// publish arrived for the gap, so a burst goes out as one append.

// maxPublishBatch caps the publishes one append carries.
const maxPublishBatch = 512

// publishBatch is a partition's batch in the making. Its mutex guards every
// field; the goroutine that set flushing is the one appending.
type publishBatch struct {
	mu          sync.Mutex
	pending     []pubReq
	lastArrival time.Time
	flushTimer  *gapTimer // armed in gap mode while publishes wait
	flushing    bool      // a flusher is appending pending batches
	closed      bool      // the partition is closing: refuse publishes
}

type pubReq struct {
	rec  []byte
	done func(wal.AppendResult, error)
}

// publish adds one encoded publish record to the partition's batch.
func (p *partition) publish(rec []byte, done func(wal.AppendResult, error)) {
	gap := p.q.b.publishGap(p.q.cfg().Durability)
	p.batch.mu.Lock()
	if p.batch.closed {
		p.batch.mu.Unlock()
		done(wal.AppendResult{}, ErrClosed)
		return
	}
	p.batch.pending = append(p.batch.pending, pubReq{rec: rec, done: done})
	p.batch.lastArrival = time.Now()
	full := len(p.batch.pending) >= maxPublishBatch
	switch {
	case gap <= 0 || full:
		if p.batch.flushTimer != nil && p.batch.flushTimer.Stop() {
			p.batch.flushTimer = nil
		}
		if p.batch.flushing {
			p.batch.mu.Unlock()
			return // the flusher in progress picks it up
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
}

// gapElapsed flushes once the gap has passed since the last arrival, or
// waits out the rest of it.
func (p *partition) gapElapsed() {
	gap := p.q.b.publishGap(p.q.cfg().Durability)
	p.batch.mu.Lock()
	p.batch.flushTimer = nil
	if rest := gap - time.Since(p.batch.lastArrival); rest > 0 && len(p.batch.pending) < maxPublishBatch {
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

// flushBatches appends pending batches until none is left.
func (p *partition) flushBatches() {
	for {
		p.batch.mu.Lock()
		batch := p.batch.pending
		p.batch.pending = nil
		if len(batch) == 0 {
			p.batch.flushing = false
			p.batch.mu.Unlock()
			return
		}
		p.batch.mu.Unlock()
		entries := make([]wal.Entry, len(batch))
		for i, r := range batch {
			entries[i] = wal.Entry{Type: recPublish, Payload: r.rec}
		}
		p.submit(entries, func(res wal.AppendResult, err error) {
			for i, r := range batch {
				r.done(wal.AppendResult{First: res.First + uint64(i), Next: res.First + uint64(i) + 1}, err)
			}
		})
	}
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
	p.batch.pending = nil
	p.batch.mu.Unlock()
	for _, r := range pending {
		r.done(wal.AppendResult{}, ErrClosed)
	}
}
