package appliance

import (
	"fmt"
	"time"

	"github.com/fibril-edge/fibril/wal"
)

// Settling. A consumer's ack, nack or reject ends its leases in the
// dispatch core; the partition then appends the decision, or copies the
// messages to the dead-letter queue first. Nothing is settled until its
// record is applied: until then the message is settling, neither ready
// nor leased. An extension only moves a lease's deadline; a delayed nack
// detaches the lease from its subscription and appends the requeue when
// the delay is over.

// settle applies a consumer's decision on tags it holds on this partition.
// It returns the tags this subscription does not hold here.
func (p *partition) settle(sub *Subscription, tags []uint64, kind byte) (stale []uint64) {
	p.mu.Lock()
	ended, stale := p.core.settle(sub, tags)
	p.releaseLocked(ended)
	p.mu.Unlock()
	if len(ended) == 0 {
		return stale
	}
	offs := leaseOffsets(ended)
	switch kind {
	case recAck:
		p.q.counters.acked.Add(int64(len(offs)))
	case recRelease:
		p.q.counters.requeued.Add(int64(len(offs)))
	default:
		p.q.counters.rejected.Add(int64(len(offs)))
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

// extend moves the deadline of the leases sub holds among tags on this
// partition to until. It returns the tags this subscription does not hold
// here.
func (p *partition) extend(sub *Subscription, tags []uint64, until time.Time) (stale []uint64) {
	p.mu.Lock()
	stale = p.core.extend(sub, tags, until)
	p.mu.Unlock()
	p.wake() // the dispatcher's timer follows the earliest deadline
	return stale
}

// delay requeues the messages sub holds among tags on this partition at
// until, not before; their credit goes back to sub now. Nothing is logged
// until then: the requeue is appended when the delayed lease expires. It
// returns the tags this subscription does not hold here.
func (p *partition) delay(sub *Subscription, tags []uint64, until time.Time) (stale []uint64) {
	p.mu.Lock()
	detached, stale := p.core.delay(sub, tags, until)
	for _, tag := range detached {
		sub.release(tag)
	}
	p.mu.Unlock()
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
			pub, err = decodePublish(rec.Type, rec.Payload)
		}
		if err == nil {
			headers := append(append([]Header(nil), pub.Headers...),
				Header{Key: "fibril-dead-letter-reason", Value: reason},
				Header{Key: "fibril-dead-letter-queue", Value: p.q.cfg().Name},
				Header{Key: "fibril-dead-letter-offset", Value: fmt.Sprintf("%d/%d", p.idx, off)})
			_, err = p.q.b.publishDeadLetter(dlq, Message{ID: pub.MessageID, Key: pub.Key, Headers: headers, Body: pub.Body})
		}
		if err != nil {
			p.q.b.log.Error("dead-letter copy failed; message stays ready", "queue", p.q.cfg().Name,
				"dead_letter", dlq, "offset", off, "err", err)
			p.mu.Lock()
			p.core.st.unlease(off)
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
