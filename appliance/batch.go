package appliance

import (
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

type pubReq struct {
	rec  []byte
	done func(wal.AppendResult, error)
}

// publish adds one encoded publish record to the partition's batch.
func (p *partition) publish(rec []byte, done func(wal.AppendResult, error)) {
	gap := p.q.b.publishGap(p.q.cfg().Durability)
	p.batchMu.Lock()
	if p.batchClosed {
		p.batchMu.Unlock()
		done(wal.AppendResult{}, ErrClosed)
		return
	}
	p.pending = append(p.pending, pubReq{rec: rec, done: done})
	p.lastArrival = time.Now()
	full := len(p.pending) >= maxPublishBatch
	switch {
	case gap <= 0 || full:
		if p.flushTimer != nil && p.flushTimer.Stop() {
			p.flushTimer = nil
		}
		if p.flushing {
			p.batchMu.Unlock()
			return // the flusher in progress picks it up
		}
		p.flushing = true
		p.batchMu.Unlock()
		p.flushBatches()
	case p.flushTimer == nil && !p.flushing:
		p.flushTimer = afterGap(gap, p.gapElapsed)
		p.batchMu.Unlock()
	default:
		p.batchMu.Unlock()
	}
}

// gapElapsed flushes once the gap has passed since the last arrival, or
// waits out the rest of it.
func (p *partition) gapElapsed() {
	gap := p.q.b.publishGap(p.q.cfg().Durability)
	p.batchMu.Lock()
	p.flushTimer = nil
	if rest := gap - time.Since(p.lastArrival); rest > 0 && len(p.pending) < maxPublishBatch {
		p.flushTimer = afterGap(rest, p.gapElapsed)
		p.batchMu.Unlock()
		return
	}
	if p.flushing {
		p.batchMu.Unlock()
		return
	}
	p.flushing = true
	p.batchMu.Unlock()
	p.flushBatches()
}

// flushBatches appends pending batches until none is left.
func (p *partition) flushBatches() {
	for {
		p.batchMu.Lock()
		batch := p.pending
		p.pending = nil
		if len(batch) == 0 {
			p.flushing = false
			p.batchMu.Unlock()
			return
		}
		p.batchMu.Unlock()
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
	p.batchMu.Lock()
	p.batchClosed = true
	if p.flushTimer != nil {
		p.flushTimer.Stop()
		p.flushTimer = nil
	}
	pending := p.pending
	p.pending = nil
	p.batchMu.Unlock()
	for _, r := range pending {
		r.done(wal.AppendResult{}, ErrClosed)
	}
}
