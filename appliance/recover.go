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
	q := &queue{b: b, subs: make(map[*Subscription]struct{}), dedupe: newDedupeTable(cfg.Partitions)}
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
// snapshot, then every record after the snapshot's boundary. Records of the
// active segment are applied while the log's recovery scans them, so
// start-up reads that segment once.
func (b *Broker) openPartition(q *queue, idx int) (*partition, error) {
	snap, haveSnap, err := b.meta.snapshot(q.cfg().Name, idx)
	if err != nil {
		return nil, err
	}
	// A replicated partition replays only what its snapshot holds: what
	// the log has after it may never have passed the replica gate, and
	// waits for it (partition.replayHeld).
	held := b.opts.Replication != nil
	rp := &replayer{q: q, live: !held, held: held, st: newPartitionState(0)}
	if haveSnap {
		rp.st = snap.restore()
		rp.addDedupe(snap.Dedupe...)
	}
	dir := b.opts.FS.PathJoin(b.queueDir(q.cfg().Name), strconv.Itoa(idx))
	if b.opts.LogDir != nil {
		dir = b.opts.LogDir(q.cfg().Name, idx)
	}
	log, err := wal.Open(dir, wal.Options{
		FS:                     b.opts.FS,
		SegmentSize:            b.opts.SegmentSize,
		TailCacheBytes:         b.opts.TailCacheBytes,
		ReadCache:              b.cache,
		SyncGroup:              b.opts.SyncGroup,
		ScrubBytesPerSecond:    max(b.opts.ScrubBytesPerSecond, 0),
		BackgroundSyncInterval: walInterval(b.Settings()),
		LockInProcess:          true, // the metadata store's lock keeps other processes out
		Logger:                 b.log.With("queue", q.cfg().Name, "partition", idx),
		OnRecover:              rp.scanned,
		OnSync:                 b.syncObserver(q.cfg().Name, idx),
		OnSyncCompleted:        b.fanInObserver(q.cfg().Name, idx),
	})
	if err != nil {
		return nil, err
	}
	if err := b.rebuild(rp, idx, log, haveSnap, snap); err != nil {
		_ = log.Close()
		return nil, err
	}
	q.dedupe.restore(idx, rp.dedupe.recs, time.Now(), q.cfg().DedupeWindow, q.cfg().dedupeBounds())
	var gate ReplicaGate
	if r := b.opts.Replication; r != nil {
		gate = r.Attach(q.cfg().Name, idx, *q.cfg(), log)
	}
	p := openPartition(q, idx, log, rp, gate)
	if len(rp.over) > 0 {
		p.q.b.bg.Go(func() { p.deadLetter(rp.over, "max-deliveries") })
	}
	return p, nil
}

// walInterval maps the runtime setting to the log's option: 0 turns the
// background sync off.
func walInterval(s Settings) time.Duration {
	if s.BackgroundSyncIntervalMs == 0 {
		return -1
	}
	return s.BackgroundSyncInterval()
}

// replayer rebuilds a partition's state from log records, first as the
// log's recovery scans the active segment, then from reads.
type replayer struct {
	q           *queue
	st          *partitionState
	dedupe      dedupeRecords      // ids published inside the dedupe window, newest within the bounds
	over        []uint64           // messages found past max deliveries
	quarantined []quarantineRecord // corrupt segments set aside
	live        bool               // applying records as recovery scans them
	held        bool               // replay stops at the snapshot: the rest waits for the replica gate
	err         error              // the first failure while scanning
}

// scanned applies a record recovery kept, while records follow on from the
// state without a gap; after a gap the replay reads the rest instead.
func (rp *replayer) scanned(r wal.Record) {
	switch {
	case !rp.live || r.Offset < rp.st.appliedNext:
	case r.Offset > rp.st.appliedNext:
		rp.live = false
	default:
		if err := rp.apply(r); err != nil {
			rp.err, rp.live = err, false
		}
	}
}

func (rp *replayer) apply(r wal.Record) error {
	cfg := rp.q.cfg()
	eff, err := rp.st.apply(r, cfg.MaxDeliveries)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	switch {
	case eff == effectOverLimit: // r settles an earlier message: dead-letter that one
		target, _ := decodeSettle(r.Payload) // apply decoded it already
		rp.over = append(rp.over, target)
	case isPublish(r.Type):
		if m := rp.st.msgs.get(r.Offset); m != nil && m.id != "" {
			if cfg.DedupeWindow > 0 {
				rp.addDedupe(dedupeRecord{ID: m.id, Offset: r.Offset, At: m.at})
			}
			m.id = "" // the table keeps it (see message.id)
		}
	}
	return nil
}

// addDedupe keeps ids found stored for the queue's dedupe table.
func (rp *replayer) addDedupe(recs ...dedupeRecord) {
	if rp.q.cfg().DedupeWindow <= 0 {
		return
	}
	bounds := rp.q.cfg().dedupeBounds()
	for _, r := range recs {
		rp.dedupe.add(r, bounds)
	}
}

// rebuild checks the snapshot against the opened log and replays what the
// scan did not apply. A corrupt sealed segment is quarantined and its
// messages counted as lost; the rest serves.
func (b *Broker) rebuild(rp *replayer, idx int, log *wal.Log, haveSnap bool, snap snapshot) error {
	name := rp.q.cfg().Name
	if rp.err != nil {
		return rp.err
	}
	switch {
	case haveSnap && snap.Boundary > log.WrittenNext():
		// Never written by this broker (it syncs before storing a
		// snapshot); only a disk that lost synced data gets here.
		b.log.Error("snapshot refers to records the log no longer has; replaying the log alone",
			"queue", name, "partition", idx, "boundary", snap.Boundary, "log_end", log.WrittenNext())
		*rp = replayer{q: rp.q, held: rp.held, st: newPartitionState(log.Head())}
	case haveSnap && snap.Boundary < log.Head():
		b.log.Error("snapshot is older than the log head; replaying the log alone",
			"queue", name, "partition", idx, "boundary", snap.Boundary, "head", log.Head())
		*rp = replayer{q: rp.q, held: rp.held, st: newPartitionState(log.Head())}
	case !haveSnap && rp.st.appliedNext < log.Head():
		rp.st.appliedNext = log.Head() // nothing applied yet: start at the head
	}
	for _, h := range log.Holes() { // quarantined at an earlier start
		rp.quarantined = append(rp.quarantined, quarantineRecord{Hole: h, Lost: rp.st.dropRange(h.From, h.To)})
	}
	st := rp.st
	end := log.WrittenNext()
	if rp.held {
		end = st.appliedNext
	}
	for from := st.appliedNext; from < end; {
		recs, err := log.ReadWritten(from, 4<<20)
		if hole, ok := b.quarantineOnRead(rp.q, idx, log, err); ok {
			lost := st.dropRange(hole.From, hole.To)
			st.appliedNext = max(st.appliedNext, hole.To)
			if !slices.ContainsFunc(rp.quarantined, func(r quarantineRecord) bool { return r.Hole.From == hole.From }) {
				rp.quarantined = append(rp.quarantined, quarantineRecord{Hole: hole, Lost: lost})
			}
			from = hole.To
			continue
		}
		if err != nil {
			return fmt.Errorf("replay at %d: %w", from, err)
		}
		if len(recs) == 0 {
			return errors.New("replay read nothing below the written frontier")
		}
		for _, r := range recs {
			if err := rp.apply(r); err != nil {
				return err
			}
		}
		from = recs[len(recs)-1].Offset + 1
	}
	// A message that went past max deliveries and was then dead-lettered
	// (its marker replayed too) is gone: only the ones left need it.
	rp.over = slices.DeleteFunc(rp.over, func(off uint64) bool { return st.msgs.get(off) == nil })
	// Messages restored past max deliveries are settling in the snapshot
	// too: find them.
	maxDeliveries := rp.q.cfg().MaxDeliveries
	st.msgs.each(func(m *message) bool {
		if maxDeliveries > 0 && int(m.deliveries) >= maxDeliveries && m.status == msgReady {
			m.status = msgSettling
			rp.over = append(rp.over, m.offset)
		}
		return true
	})
	return nil
}

// close stops the queue's partitions, syncing each log. It returns the
// subscriptions it ended (those not closed before), and the first error
// of closing the logs.
func (q *queue) close(b *Broker) ([]*Subscription, error) {
	q.subsMu.Lock()
	subs := make([]*Subscription, 0, len(q.subs))
	for s := range q.subs {
		subs = append(subs, s)
	}
	q.subsMu.Unlock()
	ended := subs[:0]
	for _, s := range subs {
		s.mu.Lock()
		if !s.closed {
			ended = append(ended, s)
		}
		s.closed = true
		s.mu.Unlock()
	}
	var errs []error
	for _, p := range q.parts {
		p.close()
		if p.isDirty() {
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
	return ended, errors.Join(errs...)
}
