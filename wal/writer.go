package wal

import (
	"fmt"
	"sync"
	"time"
)

// maxGroupBytes caps how much one group write gathers from waiting appenders.
const maxGroupBytes = 1 << 20

type controlKind int

const (
	ctlClose controlKind = iota
	ctlCrash             // stop without syncing, as a process crash would (tests)
	ctlSeal
	ctlSettings
	ctlRebase
)

// control is a request to the writer goroutine other than an append.
type control struct {
	kind      controlKind
	epoch     uint64
	base      uint64        // ctlRebase
	interval  time.Duration // ctlSettings: zero keeps, negative turns off
	threshold int64         // ctlSettings: zero keeps, negative turns off
	reply     chan error
}

// writer owns the active segment and the whole write path. mu guards its
// fields: the writer goroutine holds it for each event it handles, and an
// appender that finds the writer idle holds it to write its own append
// (writeDirect).
type writer struct {
	mu   sync.Mutex
	l    *Log
	opts Options
	// stopped is set when the writer goroutine has shut the log down:
	// nothing is written after it.
	stopped bool

	active       *segment
	pos          int64    // write position in the active segment
	reserved     int64    // end of the space reserved in the active segment (reserve)
	next         uint64   // next offset to assign; equals WrittenNext between events
	buf          []byte   // staging buffer: encoded but not yet written
	recs         []Record // the records staged in buf, their payloads the entries' own
	pendIndex    []indexEntry
	lastIndexPos int64
	group        []*Completion // encoded into buf or waiting on it, in offset order
	batch        []*Completion

	fsyncWaiters []*Completion // written, waiting for durable, in offset order
	lazyWaiters  int           // of fsyncWaiters, the AfterNextFsync ones
	syncInFlight bool
	bgInFlight   bool      // the sync in flight is a background one (it may go through the sync group)
	hurried      bool      // the sync group was told an append waits for it
	syncSeq      uint64    // syncs started (the one in flight's number)
	lastSyncAt   time.Time // when the last sync started
	timer        *time.Timer
	timerArmed   bool
	interval     time.Duration
	threshold    int64
	holding      bool

	writtenBytes, durableBytes int64 // cumulative since open
	afterJobWrite              time.Time
	dirGen, dirSynced          uint64 // a directory sync is owed while dirGen > dirSynced

	latched  bool
	latchErr error
	// cutUnwritten: the latch could not write its cut marker (at cutAt);
	// Close tries again.
	cutUnwritten bool
	cutAt        uint64
	wakeSeq      uint64
	ready        []*Completion // completed, to be woken by signal
	st           Status        // counters and times, published to Log.status after each event
}

// run handles the writer's events one at a time, each with mu held: the
// appends sent to it (the appenders that found it busy), sync results,
// the background timer and control requests. It holds mu except while it
// waits for the next event.
func (w *writer) run() {
	defer close(w.l.done)
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		in := w.l.appendCh
		if w.holdAppends() {
			in = nil
		}
		w.mu.Unlock()
		select {
		case c := <-in:
			w.mu.Lock()
			w.handleAppends(c)
		case <-w.l.syncNote:
			w.mu.Lock()
			w.takeSyncResult()
		case <-w.timer.C:
			w.mu.Lock()
			w.timerArmed = false
			w.backgroundTick()
		case <-w.l.writerKick:
			w.mu.Lock() // to look at the byte bound again, or SyncSoon
			w.afterWrite()
			if w.lazyWaiters == 0 {
				// Nothing SyncSoon could have asked for waits: every append
				// handed over before it has been written by now.
				w.l.syncSoon.Store(false)
			}
		case m := <-w.l.ctlCh:
			w.mu.Lock()
			if m.kind == ctlClose || m.kind == ctlCrash {
				m.reply <- w.shutdown(m.kind == ctlClose)
				return
			}
			m.reply <- w.handleControl(m)
		}
		w.signal()
	}
}

// writeDirect writes c on the appender's own goroutine when the writer is
// idle: no other append waits to be written, no sync bound holds appends,
// and c fits the active segment. It reports whether it did; if not, the
// appender hands c to the writer goroutine. A lone append so costs no
// hand-off between goroutines, and appends that find the writer busy
// gather into its next group write.
func (w *writer) writeDirect(c *Completion) bool {
	if !w.mu.TryLock() {
		return false
	}
	defer w.mu.Unlock()
	// queued counts appends sent to the writer goroutine and not taken
	// yet: one of them may be an earlier append of this very caller,
	// which must keep its lower offsets.
	if w.stopped || w.l.queued.Load() != 0 || w.holdAppends() ||
		(!c.syncReq && !w.latched && w.pos+int64(len(w.buf))+int64(c.size) > w.opts.SegmentSize) {
		return false // the writer goroutine rolls the segment: a roll waits for syncs
	}
	w.take(c)
	w.flush()
	w.afterWrite()
	if w.holdAppends() { // the writer goroutine stops taking appends
		select {
		case w.l.writerKick <- struct{}{}:
		default:
		}
	}
	w.signal()
	return true
}

// holdAppends applies the byte bound: past twice the threshold, appends wait
// until a sync brings the unsynced bytes down.
func (w *writer) holdAppends() bool {
	hold := !w.latched && w.threshold > 0 && w.writtenBytes-w.durableBytes >= 2*w.threshold
	if hold && !w.holding {
		w.st.Backpressured++
		if !w.syncInFlight {
			w.startSync(true)
		}
		w.hurrySync()     // held appends wait for it: no gathering
		w.publishStatus() // the writer may now wait on the sync alone
	}
	w.holding = hold
	return hold
}

// handleAppends gathers every append already waiting, encodes them into one
// buffer and writes it with one write() per segment.
func (w *writer) handleAppends(first *Completion) {
	w.l.queued.Add(-1)
	batch := append(w.batch[:0], first)
	bytes := first.size
gather:
	for bytes < maxGroupBytes {
		select {
		case c := <-w.l.appendCh:
			w.l.queued.Add(-1)
			batch = append(batch, c)
			bytes += c.size
		default:
			break gather
		}
	}
	for _, c := range batch {
		w.take(c)
	}
	clear(batch)
	w.batch = batch[:0]
	w.flush()
	w.afterWrite()
}

// take encodes c into the staging buffer (a sync request joins the group
// as it is), rolling the segment first when c does not fit, or completes
// it with the error that stops it.
func (w *writer) take(c *Completion) {
	if w.latched {
		w.complete(c, w.latchErr)
		return
	}
	if c.syncReq {
		c.res = AppendResult{First: w.next, Next: w.next}
		w.group = append(w.group, c)
		return
	}
	if w.pos+int64(len(w.buf))+int64(c.size) > w.opts.SegmentSize {
		w.flush()
		if err := w.roll(); err != nil {
			w.complete(c, err)
			return
		}
	}
	if err := w.reserve(w.pos + int64(len(w.buf)) + int64(c.size)); err != nil {
		w.complete(c, err)
		return
	}
	w.encode(c)
}

func (w *writer) encode(c *Completion) {
	c.res.First = w.next
	for _, e := range c.entries {
		recPos := w.pos + int64(len(w.buf))
		if recPos == segmentHeaderSize || recPos-w.lastIndexPos >= int64(w.opts.IndexSpacing) {
			w.pendIndex = append(w.pendIndex, indexEntry{offset: w.next, pos: recPos})
			w.lastIndexPos = recPos
		}
		w.recs = append(w.recs, Record{Offset: w.next, Type: e.Type, Payload: e.Payload})
		w.buf = appendRecord(w.buf, w.next, e.Type, e.Payload)
		w.next++
	}
	c.res.Next = w.next
	w.group = append(w.group, c)
}

// flush writes the staging buffer with one write(), advances the written
// frontier, and completes or parks the group's appends in offset order.
func (w *writer) flush() {
	if len(w.buf) > 0 {
		if _, err := w.active.file.WriteAt(w.buf, w.pos); err != nil {
			w.latch(&StorageError{Op: fmt.Sprintf("write segment %d", w.active.base), Err: err})
			for _, c := range w.group {
				w.complete(c, w.latchErr)
			}
			w.resetStaging()
			return
		}
		now := time.Now()
		if w.st.OldestUnsynced.IsZero() {
			w.st.OldestUnsynced = now
		}
		if w.syncInFlight && w.afterJobWrite.IsZero() {
			w.afterJobWrite = now
		}
		w.pos += int64(len(w.buf))
		w.writtenBytes += int64(len(w.buf))
		w.st.Writes++
		w.st.Records += uint64(len(w.recs))
		if len(w.pendIndex) > 0 {
			w.active.mu.Lock()
			w.active.addIndexLocked(w.pendIndex)
			w.active.mu.Unlock()
		}
		w.cacheWritten()
		w.l.written.advance(w.next)
	}
	durable := w.l.durable.load()
	for _, c := range w.group {
		if c.dur == AfterFlush || c.res.Next <= durable {
			w.complete(c, nil) // a sync request with nothing left to sync
		} else {
			w.fsyncWaiters = append(w.fsyncWaiters, c)
			if c.dur == AfterNextFsync {
				w.lazyWaiters++
			}
		}
	}
	w.resetStaging()
}

func (w *writer) resetStaging() {
	w.buf = w.buf[:0]
	clear(w.recs) // the payloads are the callers'
	w.recs = w.recs[:0]
	w.pendIndex = w.pendIndex[:0]
	clear(w.group)
	w.group = w.group[:0]
}

// cacheWritten puts the records just written into the tail cache.
func (w *writer) cacheWritten() {
	if w.l.cache != nil {
		w.l.cache.put(w.recs)
	}
}

// complete records one append's outcome; signal wakes it, exactly once.
func (w *writer) complete(c *Completion, err error) {
	c.err = err
	w.wakeSeq++
	c.wakeSeq = w.wakeSeq
	w.st.Wakeups++
	if err == nil && !c.syncReq {
		w.st.Appends++
	}
	w.ready = append(w.ready, c)
}

// signal publishes the status and then wakes the appends completed since
// the last signal, in the order they completed: whoever returns from an
// append finds the status already counting it.
func (w *writer) signal() {
	w.publishStatus()
	for _, c := range w.ready {
		close(c.done)
	}
	clear(w.ready)
	w.ready = w.ready[:0]
}

// roll seals the active segment (syncing only it, inline) and starts a new
// one at the next offset. Its header and directory entry sync with the next
// sync.
func (w *writer) roll() error {
	if w.latched {
		return w.latchErr
	}
	w.syncInline()
	if w.latched {
		return w.latchErr
	}
	seg, err := w.l.createSegment(w.next)
	if noSpace(err) {
		// Nothing was written: refuse this append and stay healthy, so
		// appends resume once space is freed.
		return fmt.Errorf("%w: %w", ErrNoSpace, err)
	}
	if err != nil {
		w.latch(err)
		return w.latchErr
	}
	old := w.active
	old.mu.Lock()
	old.end = w.next
	old.indexed = true
	old.mu.Unlock()
	w.l.segMu.Lock()
	w.l.segs = append(w.l.segs, seg)
	w.l.segMu.Unlock()
	w.setActive(seg, segmentHeaderSize)
	w.dirGen++
	return nil
}

func (w *writer) setActive(seg *segment, pos int64) {
	w.active = seg
	w.pos = pos
	w.reserved = pos
	if info, err := seg.file.Stat(); err == nil && w.opts.Preallocate == PreallocExtend {
		w.reserved = max(pos, info.Size()) // what createSegment or recovery reserved
	}
	w.lastIndexPos = -1 << 62
	seg.mu.Lock()
	if n := len(seg.index); n > 0 {
		w.lastIndexPos = seg.index[n-1].pos
	}
	seg.mu.Unlock()
}

// latch records a storage failure: every pending and later append fails,
// the written frontier falls back to the durable end, and a cut marker makes
// the next open cut the log to its last successful sync.
func (w *writer) latch(cause error) {
	if w.latched {
		return
	}
	w.latched = true
	w.latchErr = fmt.Errorf("%w: %w", ErrLatched, cause)
	durable := w.l.durable.load()
	w.l.opts.Logger.Error("wal: log latched; the next open cuts it to its last successful sync",
		"dir", w.l.dir, "durable_next", durable, "err", cause)
	// The marker and the status come before any wake-up: whoever sees the
	// latch error finds the cut persisted and the status latched.
	if err := writeCutMarker(w.l.fs, w.l.dirFile, w.l.dir, durable); err != nil {
		w.l.opts.Logger.Error("wal: cannot write the cut marker; this process remembers the cut, and the close tries the marker again",
			"dir", w.l.dir, "err", err)
		rememberCut(w.l.fs, w.l.dir, durable)
		w.cutUnwritten, w.cutAt = true, durable
	}
	w.st.Latched = true
	w.st.LastError = cause
	w.st.OldestUnsynced = time.Time{}
	w.publishStatus()
	close(w.l.latched)
	w.l.written.fallBack(durable, w.latchErr)
	w.l.durable.fail(w.latchErr)
	w.next = durable
	for _, c := range w.fsyncWaiters {
		w.complete(c, w.latchErr)
	}
	clear(w.fsyncWaiters)
	w.fsyncWaiters = w.fsyncWaiters[:0]
	w.lazyWaiters = 0
}

func (w *writer) handleControl(m control) error {
	switch m.kind {
	case ctlSeal:
		if w.latched {
			return w.latchErr
		}
		if m.epoch <= w.l.epoch.Load() {
			return fmt.Errorf("wal: seal at epoch %d, current %d: %w", m.epoch, w.l.epoch.Load(), ErrEpochNotAdvanced)
		}
		w.syncInline()
		if w.latched {
			return w.latchErr
		}
		if err := writeEpoch(w.l.fs, w.l.dirFile, w.l.dir, m.epoch); err != nil {
			return err
		}
		w.l.epoch.Store(m.epoch)
		w.afterWrite()
		return nil
	case ctlSettings:
		if m.interval != 0 {
			w.interval = m.interval
		}
		if m.threshold != 0 {
			w.threshold = m.threshold
		}
		if w.timerArmed {
			w.timer.Stop()
			w.timerArmed = false
		}
		w.afterWrite()
		return nil
	case ctlRebase:
		return w.rebase(m.base)
	}
	return fmt.Errorf("wal: unknown control %d", m.kind)
}

// shutdown syncs everything written (unless a crash is being simulated)
// and stops the syncer.
func (w *writer) shutdown(syncFirst bool) error {
	var err error
	w.stopped = true
	w.l.takeOutAll()
	if w.cutUnwritten {
		if err := writeCutMarker(w.l.fs, w.l.dirFile, w.l.dir, w.cutAt); err != nil {
			w.l.opts.Logger.Error("wal: cannot write the cut marker at close either: the next open in another process will not cut the log",
				"dir", w.l.dir, "err", err)
		}
	}
	if syncFirst {
		w.syncInline()
	}
	w.waitSync()
	if w.latched {
		err = w.latchErr
	}
	for _, c := range w.fsyncWaiters {
		w.complete(c, ErrClosed)
	}
	w.fsyncWaiters = nil
	w.lazyWaiters = 0
	w.timer.Stop()
	close(w.l.syncReq)
	w.l.written.fail(ErrClosed)
	w.l.durable.fail(ErrClosed)
	w.signal()
	return err
}

func (w *writer) publishStatus() {
	w.st.SyncPending = w.syncInFlight || w.timerArmed
	w.st.BackgroundSyncInterval = w.interval
	w.st.SyncBytesThreshold = w.threshold
	w.st.DurableLagBytes = w.writtenBytes - w.durableBytes
	w.l.updateStatus(func(s *Status) { *s = w.st })
}
