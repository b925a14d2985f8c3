package appliance

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/fibril-edge/fibril/wal"
)

func (b *Broker) queueDir(name string) string {
	return b.opts.FS.PathJoin(b.opts.DataDir, "queues", name)
}

// openQueue opens every partition of a declared queue.
func (b *Broker) openQueue(cfg QueueConfig) (*queue, error) {
	q := &queue{b: b, subs: make(map[*Subscription]struct{}), dedupe: make(map[string]*dedupeEntry)}
	q.config.Store(&cfg)
	for i := 0; i < cfg.Partitions; i++ {
		p, err := b.openPartition(q, i)
		if err != nil {
			q.close(b)
			return nil, fmt.Errorf("queue %s partition %d: %w", cfg.Name, i, err)
		}
		q.parts = append(q.parts, p)
	}
	return q, nil
}

// openPartition opens a partition's log and rebuilds its state: the stored
// snapshot, then every record after the snapshot's boundary.
func (b *Broker) openPartition(q *queue, idx int) (*partition, error) {
	dir := b.opts.FS.PathJoin(b.queueDir(q.cfg().Name), strconv.Itoa(idx))
	log, err := wal.Open(dir, wal.Options{
		FS:                     b.opts.FS,
		SegmentSize:            b.opts.SegmentSize,
		TailCacheBytes:         b.opts.TailCacheBytes,
		BackgroundSyncInterval: walInterval(b.Settings()),
		Logger:                 b.log.With("queue", q.cfg().Name, "partition", idx),
	})
	if err != nil {
		return nil, err
	}
	r, err := b.rebuild(q, idx, log)
	if err != nil {
		_ = log.Close()
		return nil, err
	}
	q.restoreDedupe(r.dedupe, idx)
	p := openPartition(q, idx, log, r.st)
	p.dedupe = r.dedupe
	p.quarantined = r.quarantined
	if len(r.over) > 0 {
		go p.deadLetter(r.over, "max-deliveries")
	}
	return p, nil
}

// walInterval maps the runtime setting to the log's option: 0 turns the
// background sync off.
func walInterval(s Settings) time.Duration {
	if s.BackgroundSyncIntervalMs == 0 {
		return -1
	}
	return s.syncInterval()
}

// rebuilt is a partition's state after recovery.
type rebuilt struct {
	st          *partitionState
	dedupe      []dedupeRecord     // ids published inside the dedupe window
	over        []uint64           // messages found past max deliveries
	quarantined []quarantineRecord // corrupt segments set aside
}

// rebuild loads the snapshot and replays the log after it. A corrupt sealed
// segment is quarantined and its messages counted as lost; the rest serves.
func (b *Broker) rebuild(q *queue, idx int, log *wal.Log) (rebuilt, error) {
	snap, ok, err := b.meta.snapshot(q.cfg().Name, idx)
	if err != nil {
		return rebuilt{}, err
	}
	st := newPartitionState(log.Head())
	var dedupe []dedupeRecord
	switch {
	case ok && snap.Boundary > log.WrittenNext():
		// Never written by this broker (it syncs before storing a
		// snapshot); only a disk that lost synced data gets here.
		b.log.Error("snapshot refers to records the log no longer has; replaying the log alone",
			"queue", q.cfg().Name, "partition", idx, "boundary", snap.Boundary, "log_end", log.WrittenNext())
	case ok && snap.Boundary < log.Head():
		b.log.Error("snapshot is older than the log head; replaying the log alone",
			"queue", q.cfg().Name, "partition", idx, "boundary", snap.Boundary, "head", log.Head())
	case ok:
		st, dedupe = snap.restore(), snap.Dedupe
	}
	var over []uint64
	var quarantined []quarantineRecord
	for _, h := range log.Holes() { // quarantined at an earlier start
		quarantined = append(quarantined, quarantineRecord{Hole: h, Lost: st.dropRange(h.From, h.To)})
	}
	for from := st.appliedNext; from < log.WrittenNext(); {
		recs, err := log.ReadWritten(from, 4<<20)
		if hole, ok := b.quarantineOnRead(q, idx, log, err); ok {
			lost := st.dropRange(hole.From, hole.To)
			st.appliedNext = max(st.appliedNext, hole.To)
			quarantined = append(quarantined, quarantineRecord{Hole: hole, Lost: lost})
			from = hole.To
			continue
		}
		if err != nil {
			return rebuilt{}, fmt.Errorf("replay at %d: %w", from, err)
		}
		if len(recs) == 0 {
			return rebuilt{}, errors.New("replay read nothing below the written frontier")
		}
		for _, r := range recs {
			eff, err := st.apply(r, q.cfg().MaxDeliveries)
			if err != nil {
				return rebuilt{}, fmt.Errorf("replay: %w", err)
			}
			switch {
			case eff == effectOverLimit: // r settles an earlier message: dead-letter that one
				target, _ := decodeSettle(r.Payload) // apply decoded it already
				over = append(over, target)
			case r.Type == recPublish && q.cfg().DedupeWindow > 0:
				if m := st.msgs[r.Offset]; m != nil && m.id != "" {
					dedupe = append(dedupe, dedupeRecord{ID: m.id, Offset: r.Offset, At: m.at})
				}
			}
		}
		from = recs[len(recs)-1].Offset + 1
	}
	// A message that went past max deliveries and was then dead-lettered
	// (its marker replayed too) is gone: only the ones left need it.
	over = slices.DeleteFunc(over, func(off uint64) bool { return st.msgs[off] == nil })
	// Messages restored past max deliveries are settling in the snapshot
	// too: find them.
	for off, m := range st.msgs {
		if q.cfg().MaxDeliveries > 0 && int(m.deliveries) >= q.cfg().MaxDeliveries && m.status == msgReady {
			m.status = msgSettling
			over = append(over, off)
		}
	}
	return rebuilt{st: st, dedupe: dedupe, over: over, quarantined: quarantined}, nil
}

// close stops the queue's partitions, syncing each log.
func (q *queue) close(b *Broker) error {
	q.subsMu.Lock()
	subs := make([]*Subscription, 0, len(q.subs))
	for s := range q.subs {
		subs = append(subs, s)
	}
	q.subsMu.Unlock()
	for _, s := range subs {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
	}
	var errs []error
	for _, p := range q.parts {
		p.close()
		if p.dirty.Load() {
			if err := b.checkpointPartition(p); err != nil {
				errs = append(errs, err)
			}
		}
		// Under ckptMu: a checkpoint in flight (timer or Checkpoint)
		// finishes before the log closes, and so before Close closes
		// the metadata store it writes to.
		p.ckptMu.Lock()
		p.logClosed = true
		err := p.log.Close()
		p.ckptMu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("close %s/%d: %w", q.cfg().Name, p.idx, err))
		}
	}
	return errors.Join(errs...)
}
