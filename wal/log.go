package wal

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Boundary says when an append completes: at the written or at the
// durable frontier. (A queue's mode, durable or buffered, is the
// broker's; it picks the boundary its appends complete at.)
type Boundary uint8

const (
	// AfterFlush completes once the records are handed to the kernel
	// (the written frontier): they survive a process crash, not a power loss.
	AfterFlush Boundary = 1
	// AfterFsync completes once an fdatasync covers the records (the durable
	// frontier).
	AfterFsync Boundary = 2
	// AfterNextFsync completes, like AfterFsync, once an fdatasync covers
	// the records, but asks for no sync of its own: the next sync does,
	// whether an AfterFsync append, the byte bound, a roll or the
	// background timer starts it, or SyncSoon. With no background interval
	// it asks for one like AfterFsync. For records whose loss in a power
	// cut costs no promise (a consumer's ack: the message is delivered
	// again), so that they share the page writes of the records around
	// them instead of each rewriting the log's last page.
	AfterNextFsync Boundary = 3
)

func (d Boundary) String() string {
	switch d {
	case AfterFlush:
		return "after-flush"
	case AfterFsync:
		return "after-fsync"
	case AfterNextFsync:
		return "after-next-fsync"
	}
	return fmt.Sprintf("boundary(%d)", uint8(d))
}

// AppendResult names the offsets an append took: First up to, not
// including, Next.
type AppendResult struct {
	First, Next uint64
}

// Log is a segmented, checksummed write-ahead log with a written and a
// durable frontier. All methods are safe for concurrent use.
type Log struct {
	dir       string
	opts      Options
	fs        vfs.FS
	lock      io.Closer
	dirFile   dirSyncer  // syncs the directory, opening it each time
	cache     *tailCache // nil when the tail cache is off
	ahead     readAhead  // the last chunk read from a segment file
	readAhead int        // bytes a read from a segment file brings in

	written frontier // WrittenNext: handed to the kernel
	durable frontier // DurableNext: covered by a completed fdatasync
	epoch   atomic.Uint64
	// incarnation and starts are set by Open and never change
	// (incarnation.go).
	incarnation uint64
	starts      []incarnationStart

	segMu sync.RWMutex // guards segs, holes and head
	segs  []*segment   // sorted by base; the last is the active segment
	holes []Hole       // quarantined ranges, sorted
	head  uint64
	// anyHoles mirrors len(holes) > 0, so a read checks for holes
	// without segMu while there are none (holesChangedLocked).
	anyHoles atomic.Bool

	w           *writer
	appendCh    chan *Completion // unbuffered: a send means the writer took it
	queued      atomic.Int64     // appends being sent on appendCh and not taken yet
	ctlCh       chan control
	syncReq     chan syncJob
	syncDone    chan syncResult // the sync in flight's result, taken with w.mu held
	syncNote    chan struct{}   // wakes the writer goroutine for a result
	groupMember member          // this log's standing in Options.SyncGroup, owned by runSyncer
	// writerKick wakes the writer goroutine after a direct write made
	// the byte bound hold appends, so it stops taking them, and for
	// SyncSoon.
	writerKick chan struct{}
	// syncSoon asks the writer to sync what AfterNextFsync appends wait
	// for at its next event (SyncSoon); any sync that starts clears it.
	syncSoon atomic.Bool
	closing  chan struct{} // closed when Close starts
	done     chan struct{} // closed when the writer has stopped
	latched  chan struct{} // closed when the log latches

	statusMu sync.Mutex // guards status
	status   Status

	// Reads served from the tail cache, the node's read cache and the
	// segment files, per record.
	cacheHits, readCacheHits, cacheMisses atomic.Uint64
	// cacheGen keys this log's blocks in the node's read cache: a fresh
	// one at open, and again when a range is declared lost.
	cacheGen atomic.Uint64
	// readLow is the lowest offset a read asked for since the tail cache
	// last dropped blocks (math.MaxUint64: none): a block leaving the tail
	// goes to the read cache only if a read was at or below its first
	// offset (leaveTail).
	readLow atomic.Uint64
	// offered are the blocks this log handed the read cache, until the
	// readers pass them; the writer's (leaveTail runs under its mu).
	offered []uint64

	damageMu  sync.Mutex    // serializes keeping damaged ranges aside
	scrubDone chan struct{} // closed when the scrub has stopped (at once when off)

	recovery  RecoveryReport
	closeOnce sync.Once
	closeErr  error
}

// Completion is the handle of an asynchronous append.
type Completion struct {
	entries []Entry
	dur     Boundary
	size    int  // encoded bytes
	syncReq bool // a forced sync with no entries
	done    chan struct{}
	res     AppendResult
	err     error
	wakeSeq uint64 // order in which the writer completed it
}

// Done is closed when the append has completed or failed.
func (c *Completion) Done() <-chan struct{} { return c.done }

// Result returns the outcome; call it after Done is closed.
func (c *Completion) Result() (AppendResult, error) { return c.res, c.err }

// Wait blocks until the append completes or ctx ends. A cancelled wait does
// not cancel the append, which may still complete.
func (c *Completion) Wait(ctx context.Context) (AppendResult, error) {
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		return AppendResult{}, ctx.Err()
	}
}

func failedCompletion(err error) *Completion {
	c := &Completion{done: make(chan struct{}), err: err}
	close(c.done)
	return c
}

// Append writes entries as consecutive records and blocks until they reach
// the boundary d names.
func (l *Log) Append(ctx context.Context, entries []Entry, d Boundary) (AppendResult, error) {
	return l.appendAsync(ctx, entries, d).Wait(ctx)
}

// AppendAsync hands entries to the writer and returns without waiting for
// their boundary: when the writer is idle it writes them itself, on the
// caller's goroutine (one write(), so an AfterFlush append is done when
// it returns); when the writer is busy it waits for it to take them, and
// longer while the byte bound holds appends. The entries' payloads must
// not change from now on: the tail cache serves readers from them
// (Entry).
func (l *Log) AppendAsync(entries []Entry, d Boundary) *Completion {
	return l.appendAsync(context.Background(), entries, d)
}

// appendAsync is AppendAsync giving up with ctx's error if ctx ends before
// the writer takes the entries.
func (l *Log) appendAsync(ctx context.Context, entries []Entry, d Boundary) *Completion {
	size, err := l.checkBatch(entries, d)
	if err != nil {
		return failedCompletion(err)
	}
	c := &Completion{entries: entries, dur: d, size: size, done: make(chan struct{})}
	if err := l.hand(ctx, c); err != nil {
		return failedCompletion(err)
	}
	return c
}

// hand gives c to the writer: written on this goroutine when the writer
// is idle, else sent to the writer goroutine, which has taken it when
// hand returns.
func (l *Log) hand(ctx context.Context, c *Completion) error {
	if l.w.writeDirect(c) {
		return nil
	}
	l.queued.Add(1)
	select {
	case l.appendCh <- c:
		return nil
	case <-l.closing:
		l.queued.Add(-1)
		return ErrClosed
	case <-ctx.Done():
		l.queued.Add(-1)
		return ctx.Err()
	}
}

func (l *Log) checkBatch(entries []Entry, d Boundary) (int, error) {
	if d != AfterFlush && d != AfterFsync && d != AfterNextFsync {
		return 0, fmt.Errorf("wal: unknown append boundary %d", d)
	}
	if len(entries) == 0 {
		return 0, ErrEmptyBatch
	}
	size := 0
	for i, e := range entries {
		if e.Type == 0 {
			return 0, fmt.Errorf("entry %d: %w", i, ErrInvalidType)
		}
		if len(e.Payload) > l.opts.MaxRecordSize {
			return 0, fmt.Errorf("entry %d: payload of %d bytes over %d: %w",
				i, len(e.Payload), l.opts.MaxRecordSize, ErrTooLarge)
		}
		size += encodedSize(len(e.Payload))
	}
	if int64(size) > l.opts.SegmentSize-segmentHeaderSize {
		return 0, fmt.Errorf("wal: batch of %d bytes does not fit a %d-byte segment: %w",
			size, l.opts.SegmentSize, ErrTooLarge)
	}
	return size, nil
}

// MaxBatchBytes is the most segment bytes one append may take (a batch
// never spans segments); RecordSize gives each record's share.
func (l *Log) MaxBatchBytes() int64 { return l.opts.SegmentSize - segmentHeaderSize }

// RecordSize is the segment bytes a record with an n-byte payload takes.
func RecordSize(n int) int { return encodedSize(n) }

// WrittenNext is the offset after the last record handed to the kernel.
func (l *Log) WrittenNext() uint64 { return l.written.load() }

// DurableNext is the offset after the last record covered by an fdatasync.
// It is never above WrittenNext.
func (l *Log) DurableNext() uint64 { return l.durable.load() }

// WaitWritten blocks until WrittenNext reaches atLeast and returns it. It
// fails when the log latches or closes first.
func (l *Log) WaitWritten(ctx context.Context, atLeast uint64) (uint64, error) {
	return l.written.wait(ctx, atLeast)
}

// WaitDurable blocks until DurableNext reaches atLeast and returns it.
func (l *Log) WaitDurable(ctx context.Context, atLeast uint64) (uint64, error) {
	return l.durable.wait(ctx, atLeast)
}

// Sync makes every record written before the call durable. It shares the
// fsync pipeline with AfterFsync appends.
func (l *Log) Sync(ctx context.Context) error {
	c := &Completion{syncReq: true, dur: AfterFsync, done: make(chan struct{})}
	if err := l.hand(ctx, c); err != nil {
		return err
	}
	_, err := c.Wait(ctx)
	return err
}

// SyncSoon asks for a sync of what AfterNextFsync appends wait for, at
// once, and returns without waiting: for a caller that needs their
// effect now (a queue full of acked messages whose acks wait for a sync).
// It does nothing when no such append waits.
func (l *Log) SyncSoon() {
	l.syncSoon.Store(true)
	select {
	case l.writerKick <- struct{}{}:
	default: // a kick is pending already
	}
}

// Seal flushes and syncs everything written, waits for syncs in flight, and
// then persists epoch, which must be above the current one.
func (l *Log) Seal(ctx context.Context, epoch uint64) error {
	return l.control(ctx, control{kind: ctlSeal, epoch: epoch})
}

// Latched is closed once the log latches after a storage failure (its
// next open cuts it back to its last sync).
func (l *Log) Latched() <-chan struct{} { return l.latched }

// Epoch is the epoch of the last Seal, persisted across reopen.
func (l *Log) Epoch() uint64 { return l.epoch.Load() }

// SetBackgroundSyncInterval changes the background sync cadence live; zero
// or negative turns it off.
func (l *Log) SetBackgroundSyncInterval(d time.Duration) error {
	if d <= 0 {
		d = -1
	}
	return l.control(context.Background(), control{kind: ctlSettings, interval: d, threshold: 0})
}

// SetSyncBytesThreshold changes the unsynced-bytes bound live; zero or
// negative turns it off.
func (l *Log) SetSyncBytesThreshold(n int64) error {
	if n <= 0 {
		n = -1
	}
	return l.control(context.Background(), control{kind: ctlSettings, threshold: n})
}

func (l *Log) control(ctx context.Context, m control) error {
	m.reply = make(chan error, 1)
	select {
	case l.ctlCh <- m:
	case <-l.closing:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-m.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Head is the lowest offset that reads may ask for.
func (l *Log) Head() uint64 {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	return l.head
}

// AdvanceHead moves the head to offset (retention) and removes the segment
// files wholly below it. It never passes the durable frontier and never
// blocks the writer. The head is not persisted: after a reopen it is the base
// of the first segment that remained.
func (l *Log) AdvanceHead(offset uint64) error {
	if d := l.durable.load(); offset > d {
		return fmt.Errorf("wal: head %d past durable %d: %w", offset, d, ErrHeadBeyondDurable)
	}
	l.segMu.Lock()
	if offset <= l.head {
		l.segMu.Unlock()
		return nil
	}
	l.head = offset
	// Segment i is wholly below the head when the next one starts at or
	// below it. The active segment always stays.
	n := sort.Search(len(l.segs)-1, func(i int) bool { return l.segs[i+1].base > offset })
	gone := append([]*segment(nil), l.segs[:n]...)
	l.segs = append(l.segs[:0:0], l.segs[n:]...)
	l.segMu.Unlock()

	var firstErr error
	for _, s := range gone {
		s.removed.Store(true)
		if err := l.fs.Remove(s.path); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("wal: remove segment %d: %w", s.base, err)
		}
		s.release()
	}
	return firstErr
}

// Recovery reports what Open found and repaired.
func (l *Log) Recovery() RecoveryReport { return l.recovery }

// Close syncs everything written, stops the writer and closes the files,
// recording the clean close so that the next Open keeps the incarnation.
// A latched log closes without syncing; its reopen carries out the cut.
func (l *Log) Close() error {
	l.closeOnce.Do(func() {
		close(l.closing)
		reply := make(chan error, 1)
		l.ctlCh <- control{kind: ctlClose, reply: reply}
		l.closeErr = <-reply
		<-l.done
		<-l.scrubDone
		if end := l.durable.load(); l.closeErr == nil && end == l.written.load() {
			l.closeErr = l.closeIncarnation(end)
		}
		l.closeFiles()
	})
	return l.closeErr
}

func (l *Log) closeFiles() {
	l.segMu.Lock()
	for _, s := range l.segs {
		s.release()
	}
	l.segs = nil
	l.segMu.Unlock()
	if l.cache != nil {
		l.cache.close()
	}
	_ = l.lock.Close()
}
