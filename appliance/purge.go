package appliance

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/fibril-edge/fibril/wal"
)

// purgeChunk is the most discards one append of a purge carries.
const purgeChunk = 1024

// Purge discards every ready message of a queue and returns how many it
// discarded. Messages delivered and not settled yet stay with their
// consumers, and messages published meanwhile stay in the queue; neither
// goes to the dead-letter queue. Each discard is a log record at the
// queue's durability, so a purge survives a restart like any settle. The
// context bounds the wait for the discards to complete, not the discards.
func (b *Broker) Purge(ctx context.Context, name string) (int64, error) {
	q, err := b.queue(name)
	if err != nil {
		return 0, err
	}
	var (
		mu     sync.Mutex
		purged int64
		errs   []error
		wg     sync.WaitGroup
	)
	for _, p := range q.parts {
		offs := p.takeReady()
		for len(offs) > 0 {
			chunk := offs[:min(len(offs), purgeChunk)]
			offs = offs[len(chunk):]
			wg.Add(1)
			p.submit(settleEntries(recDiscard, chunk), func(_ wal.AppendResult, err error) {
				defer wg.Done()
				if err != nil {
					p.unsettle(chunk) // ready again: nothing was recorded
				}
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, fmt.Errorf("queue %s partition %d: %w", name, p.idx, err))
					return
				}
				purged += int64(len(chunk))
				q.counters.purged.Add(int64(len(chunk)))
			})
		}
	}
	for _, p := range q.parts {
		p.syncSettles() // the purge answers once its discards are applied
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return 0, fmt.Errorf("purge of queue %s: %w (the discards still complete)", name, ctx.Err())
	}
	return purged, errors.Join(errs...)
}

// takeReady marks every ready message of the partition as settling and
// returns their offsets, lowest first.
func (p *partition) takeReady() []uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var offs []uint64
	for {
		m := p.core.st.oldestReady()
		if m == nil {
			return offs
		}
		m.status = msgSettling
		offs = append(offs, m.offset)
	}
}

// unsettle makes ready again messages whose settle failed to append.
func (p *partition) unsettle(offs []uint64) {
	p.mu.Lock()
	for _, off := range offs {
		if m := p.core.st.msgs.get(off); m != nil && m.status == msgSettling {
			p.core.st.makeReady(m)
		}
	}
	p.mu.Unlock()
	p.wake()
}
