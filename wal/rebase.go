package wal

import (
	"context"
	"fmt"
)

// Rebase moves an empty log to base: Head, WrittenNext and DurableNext
// become base and the next record takes offset base. It lets a copy start
// at another log's head (a new follower of a queue whose first records
// retention has removed). It fails with ErrNotEmpty when the log holds a
// record, and never moves a log back. The epoch is kept.
//
// It is crash safe: the empty segment file is removed and the directory
// synced before the segment at base is created and synced, so a crash in
// between reopens as an empty log at its old base (Open creates it), which
// can be rebased again.
func (l *Log) Rebase(ctx context.Context, base uint64) error {
	return l.control(ctx, control{kind: ctlRebase, base: base})
}

// rebase carries out Rebase on the writer goroutine.
func (w *writer) rebase(base uint64) error {
	if w.latched {
		return w.latchErr
	}
	w.l.segMu.RLock()
	head, segs := w.l.head, len(w.l.segs)
	w.l.segMu.RUnlock()
	if w.next != head || segs != 1 {
		return fmt.Errorf("wal: rebase to %d: records %d to %d: %w", base, head, w.next, ErrNotEmpty)
	}
	if base < w.next {
		return fmt.Errorf("wal: rebase to %d would move the log back from %d", base, w.next)
	}
	if base == w.next {
		return nil
	}
	w.waitSync() // no sync job may hold the file about to go
	if w.latched {
		return w.latchErr
	}
	old := w.active
	if err := w.l.fs.Remove(old.path); err != nil {
		return fmt.Errorf("wal: rebase: remove segment %d: %w", old.base, err) // nothing changed
	}
	if err := w.l.dirFile.Sync(); err != nil {
		w.latch(&StorageError{Op: "sync directory", Err: err})
		return w.latchErr
	}
	seg, err := w.l.createSegment(base)
	if err == nil {
		if err = w.l.syncNewSegment(seg); err != nil {
			seg.release()
		}
	}
	if err != nil {
		// The log has no segment file now: latch, and the reopen starts an
		// empty log over.
		w.latch(fmt.Errorf("rebase to %d: %w", base, err))
		return w.latchErr
	}
	w.l.segMu.Lock()
	w.l.segs, w.l.head = []*segment{seg}, base
	w.l.segMu.Unlock()
	old.removed.Store(true)
	old.release()
	w.setActive(seg, segmentHeaderSize)
	w.next = base
	w.dirSynced = w.dirGen
	w.l.written.advance(base)
	w.l.durable.advance(base)
	return nil
}
