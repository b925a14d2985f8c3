package appliance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/fibril-edge/fibril/wal"
)

// Checkpoints. A partition that applied anything is checkpointed
// CheckpointDelay later (the timer runs only while some partition is
// dirty): capture the state at a log boundary, sync the log and check that
// the durable frontier covers the boundary, and only then store the
// snapshot (a synced Pebble write) as recovery authority. Then retention
// moves the log's head to the lowest offset still needed: never past an
// unsettled message, the snapshot's boundary, or the durable frontier; on
// a replicated partition also never past what a follower has not synced
// or an id the dedupe window remembers (a copy rebuilds from the log).

// checkpointWorkers bounds how many partitions one pass checkpoints at
// once. Run together, their log syncs share the sync group's file-system
// syncs and their snapshot writes Pebble's group commit: a pass over a
// thousand dirty partitions costs a few syncs, where one partition after
// another cost two thousand in a row, and a burst of journal commits that
// held up every log's writes on the file system for tens of milliseconds
// at a time.
const checkpointWorkers = 32

// markDirty schedules a checkpoint of p.
func (b *Broker) markDirty(p *partition) {
	b.ckptMu.Lock()
	defer b.ckptMu.Unlock()
	if _, ok := b.ckptDirty[p]; ok {
		return
	}
	b.ckptDirty[p] = struct{}{}
	if b.ckptTimer == nil {
		b.ckptTimer = time.AfterFunc(b.opts.CheckpointDelay, b.checkpointDirty)
	}
}

// checkpointDirty checkpoints every partition marked dirty.
func (b *Broker) checkpointDirty() {
	b.ckptMu.Lock()
	dirty := b.ckptDirty
	b.ckptDirty = make(map[*partition]struct{})
	b.ckptTimer = nil
	b.ckptMu.Unlock()
	parts := make([]*partition, 0, len(dirty))
	for p := range dirty {
		select {
		case <-p.closing:
			continue
		default:
		}
		parts = append(parts, p)
	}
	for i, err := range b.checkpointEach(parts) {
		if err != nil && !errors.Is(err, wal.ErrClosed) {
			p := parts[i]
			b.log.Error("checkpoint failed", "queue", p.q.cfg().Name, "partition", p.idx, "err", err)
		}
	}
}

// checkpointEach checkpoints parts, checkpointWorkers at a time, and
// returns each one's error in its place.
func (b *Broker) checkpointEach(parts []*partition) []error {
	return inParallel(len(parts), func(i int) error { return b.checkpointPartition(parts[i]) })
}

// inParallel runs f(0) to f(n-1), checkpointWorkers at a time, and returns
// each call's error in its place.
func inParallel(n int, f func(i int) error) []error {
	errs := make([]error, n)
	var g errgroup.Group
	g.SetLimit(checkpointWorkers)
	for i := range n {
		g.Go(func() error {
			errs[i] = f(i)
			return nil
		})
	}
	g.Wait()
	return errs
}

// Checkpoint checkpoints every partition of every queue now.
func (b *Broker) Checkpoint(ctx context.Context) error {
	b.mu.RLock()
	var parts []*partition
	for _, q := range b.queues {
		parts = append(parts, q.parts...)
	}
	b.mu.RUnlock()
	return errors.Join(b.checkpointEach(parts)...)
}

func (b *Broker) checkpointPartition(p *partition) error {
	p.ckptMu.Lock()
	defer p.ckptMu.Unlock()
	if p.logClosed { // a timer checkpoint that lost the race with Close
		return fmt.Errorf("checkpoint %s/%d: %w", p.q.cfg().Name, p.idx, wal.ErrClosed)
	}
	// 1. Capture at a boundary.
	p.mu.Lock()
	snap := p.core.st.capture()
	snap.Dedupe = p.q.dedupe.records(p.idx) // every id applied below the boundary is marked: remember runs under mu
	p.dirty = false
	p.mu.Unlock()
	// 2. Sync the log to the boundary and check the durable frontier.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.log.Sync(ctx); err != nil {
		p.setDirty()
		return fmt.Errorf("checkpoint %s/%d: sync: %w", p.q.cfg().Name, p.idx, err)
	}
	if d := p.log.DurableNext(); d < snap.Boundary {
		p.setDirty()
		return fmt.Errorf("checkpoint %s/%d: durable %d below boundary %d", p.q.cfg().Name, p.idx, d, snap.Boundary)
	}
	// 3. Store the snapshot.
	if err := b.meta.putSnapshot(p.q.cfg().Name, p.idx, snap); err != nil {
		p.setDirty()
		return err
	}
	b.log.Debug("checkpoint stored", "queue", p.q.cfg().Name, "partition", p.idx, "boundary", snap.Boundary)
	// 4. Retention.
	head := snap.Boundary
	if len(snap.Messages) > 0 {
		head = min(head, snap.Messages[0].offset)
	}
	if p.gate != nil {
		// Keep what the slowest follower has not synced, and, as a copy
		// that becomes the owner rebuilds the queue from its log alone,
		// the records of the ids the dedupe window still remembers.
		head = min(head, p.gate.Floor(), oldestRemembered(snap.Dedupe, p.q.cfg().DedupeWindow, time.Now()))
	}
	if err := p.log.AdvanceHead(head); err != nil {
		return fmt.Errorf("checkpoint %s/%d: retention: %w", p.q.cfg().Name, p.idx, err)
	}
	return nil
}

// oldestRemembered is the offset of the oldest id in recs still inside the
// dedupe window at now, or the largest offset when there is none.
func oldestRemembered(recs []dedupeRecord, window time.Duration, now time.Time) uint64 {
	oldest := ^uint64(0)
	if window <= 0 {
		return oldest
	}
	for _, r := range recs {
		if now.Sub(r.At) < window {
			oldest = min(oldest, r.Offset)
		}
	}
	return oldest
}

// setDirty and isDirty read and write the flag a checkpoint clears.
func (p *partition) setDirty() {
	p.mu.Lock()
	p.dirty = true
	p.mu.Unlock()
}

func (p *partition) isDirty() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dirty
}
