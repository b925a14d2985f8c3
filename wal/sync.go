package wal

import (
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The sync side of the writer: when to sync (waiters, the byte bound, the
// background timer), the syncer goroutine that runs one fdatasync at a time
// off the write path, and how a completed sync moves the durable frontier.

// syncJob asks the syncer to fdatasync the active segment (and the directory
// when a segment was created since the last directory sync). target is the
// written frontier when the job was taken: a success makes it durable.
type syncJob struct {
	file        vfs.File
	dir         bool
	dirGen      uint64
	target      uint64
	targetBytes int64
	background  bool
	interval    time.Duration // the log's background sync interval when the job was taken
	seq         uint64        // the writer's count of syncs started, this one's
}

type syncResult struct {
	job  syncJob
	err  error
	took time.Duration
}

// afterWrite starts the sync the waiters or the byte bound need, or arms the
// background timer. AfterNextFsync waiters alone start one only when no
// background timer would, or SyncSoon asked.
func (w *writer) afterWrite() {
	if w.latched {
		return
	}
	if w.syncInFlight {
		if len(w.fsyncWaiters) > w.lazyWaiters {
			w.hurrySync()
		}
		return
	}
	switch {
	case len(w.fsyncWaiters) > w.lazyWaiters:
		w.startSync(false)
	case w.lazyWaiters > 0 && (w.interval <= 0 || w.l.syncSoon.Load()):
		w.startSync(false)
	case w.threshold > 0 && w.writtenBytes-w.durableBytes >= w.threshold:
		w.startSync(true)
	default:
		w.armTimer()
	}
}

func (w *writer) armTimer() {
	if w.latched || w.interval <= 0 || w.timerArmed || w.syncInFlight || w.next == w.l.durable.load() {
		return
	}
	due := time.Until(w.lastSyncAt.Add(w.interval))
	if due <= 0 {
		w.startSync(true)
		return
	}
	w.timer.Reset(due)
	w.timerArmed = true
}

func (w *writer) backgroundTick() {
	if w.latched || w.syncInFlight || w.next == w.l.durable.load() {
		return
	}
	w.startSync(true)
}

// startSync submits one sync of everything written; at most one is in flight.
func (w *writer) startSync(background bool) {
	w.syncInFlight, w.bgInFlight = true, background
	w.syncSeq++
	// This sync covers what SyncSoon asked for: it starts after a whole
	// group is written. (syncInline leaves the flag: a roll syncs before
	// the rest of its group is written.)
	w.l.syncSoon.Store(false)
	w.lastSyncAt = time.Now()
	w.l.syncReq <- syncJob{
		file:        w.active.file,
		dir:         w.dirGen > w.dirSynced,
		dirGen:      w.dirGen,
		target:      w.next,
		targetBytes: w.writtenBytes,
		background:  background,
		interval:    w.interval,
		seq:         w.syncSeq,
	}
}

// syncFinished applies a sync result; next says whether it may start the
// next sync or arm the timer.
func (w *writer) syncFinished(r syncResult, next bool) {
	w.syncInFlight, w.bgInFlight, w.hurried = false, false, false
	if w.latched {
		return // a result of a sync started before the latch
	}
	if r.err != nil {
		if r.job.background {
			w.st.BackgroundSyncFailures++
		}
		w.latch(&StorageError{Op: "sync", Err: r.err})
		return
	}
	w.applySync(r.job, r.took)
	if next {
		w.afterWrite()
	}
}

// applySync publishes a successful sync: the durable frontier moves to the
// job's target and the appends it covers complete, lowest offset first.
func (w *writer) applySync(job syncJob, took time.Duration) {
	if job.dir && job.dirGen > w.dirSynced {
		w.dirSynced = job.dirGen
	}
	w.durableBytes = job.targetBytes
	w.st.Syncs++
	if job.background {
		w.st.BackgroundSyncs++
	}
	w.st.LastSync = time.Now()
	w.st.LastSyncDuration = took
	if job.target == w.next {
		w.st.OldestUnsynced = time.Time{}
	} else {
		w.st.OldestUnsynced = w.afterJobWrite
	}
	w.afterJobWrite = time.Time{}
	w.l.durable.advance(job.target)
	n, appends := 0, 0
	for n < len(w.fsyncWaiters) && w.fsyncWaiters[n].res.Next <= job.target {
		if !w.fsyncWaiters[n].syncReq {
			w.st.SyncedAppends++
			appends++
		}
		if w.fsyncWaiters[n].dur == AfterNextFsync {
			w.lazyWaiters--
		}
		w.complete(w.fsyncWaiters[n], nil)
		n++
	}
	clear(w.fsyncWaiters[:n])
	w.fsyncWaiters = append(w.fsyncWaiters[:0], w.fsyncWaiters[n:]...)
	if appends > 0 && w.l.opts.OnSyncCompleted != nil {
		w.l.opts.OnSyncCompleted(appends)
	}
}

// hurrySync tells the sync group that an append, a rollover or Close
// waits for this log's background sync in flight: the log leaves the
// group's wait and syncs its own file (or, leading, stops waiting out the
// spacing), so a publish waits at most for a file-system sync already
// under way, never for the group's spacing.
func (w *writer) hurrySync() {
	if w.syncInFlight && w.bgInFlight && !w.hurried {
		w.hurried = true
		w.l.opts.SyncGroup.hurry(&w.l.groupMember, w.syncSeq)
	}
}

// waitSync waits for the sync in flight, if any, and applies its result.
func (w *writer) waitSync() {
	w.hurrySync()
	if w.syncInFlight {
		w.syncFinished(<-w.l.syncDone, false)
	}
}

// takeSyncResult applies the result of the sync in flight if the syncer
// delivered it. The result is taken only with mu held, so waitSync, also
// under mu, never waits for a result taken by someone else.
func (w *writer) takeSyncResult() {
	select {
	case r := <-w.l.syncDone:
		w.syncFinished(r, true)
	default: // waitSync took it
	}
}

// syncInline syncs the active segment (and the directory if owed) on the
// writer goroutine: used by rollover, seal and close, never by appends.
func (w *writer) syncInline() {
	w.waitSync()
	if w.latched || (w.next == w.l.durable.load() && w.dirGen == w.dirSynced) {
		return
	}
	job := syncJob{file: w.active.file, dir: w.dirGen > w.dirSynced, dirGen: w.dirGen,
		target: w.next, targetBytes: w.writtenBytes}
	w.lastSyncAt = time.Now()
	start := time.Now()
	err := w.active.file.SyncData()
	w.l.observeSync(time.Since(start), err)
	if err == nil && job.dir {
		err = w.l.dirFile.Sync()
	}
	if err != nil {
		w.latch(&StorageError{Op: "sync", Err: err})
		return
	}
	w.applySync(job, time.Since(start))
}

// runSyncer performs sync jobs one at a time, off the writer goroutine, so
// writes go on while a sync is in flight. Syncs go through the node's
// SyncGroup, if it has one (runSync).
func (l *Log) runSyncer() {
	for job := range l.syncReq {
		l.syncDone <- l.runSync(job)
		select {
		case l.syncNote <- struct{}{}:
		default: // a note is pending already
		}
	}
}

// runSync performs one sync job, the segment's (through the sync group's
// background or waited lane, when the log has one), and the directory's
// when one is owed.
func (l *Log) runSync(job syncJob) syncResult {
	start := time.Now()
	var err error
	if job.background {
		err = l.opts.SyncGroup.sync(&l.groupMember, job.file, l.observeSync, job.interval, job.seq)
	} else {
		err = l.opts.SyncGroup.syncWaited(&l.groupMember, job.file, l.observeSync)
	}
	if err == nil && job.dir {
		if derr := l.dirFile.Sync(); derr != nil {
			err = fmt.Errorf("sync directory: %w", derr)
		}
	}
	return syncResult{job: job, err: err, took: time.Since(start)}
}

// observeSync reports one fdatasync of a segment file to Options.OnSync.
func (l *Log) observeSync(took time.Duration, err error) {
	if l.opts.OnSync != nil {
		l.opts.OnSync(took, err)
	}
}
