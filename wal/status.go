package wal

import "time"

// Status is a snapshot of the log's progress and health. Every position
// names its boundary: written (handed to the kernel) or durable (synced).
type Status struct {
	WrittenNext uint64 // offset after the last written record
	DurableNext uint64 // offset after the last synced record
	Head        uint64 // lowest readable offset
	Epoch       uint64 // epoch of the last seal

	// DurableLagRecords and DurableLagBytes are written but not yet synced.
	DurableLagRecords uint64
	DurableLagBytes   int64
	// OldestUnsynced is when the oldest written-but-unsynced record was
	// written; zero when nothing is unsynced.
	OldestUnsynced time.Time
	// LastSync is when the last successful sync completed; zero before one.
	LastSync time.Time
	// LastSyncDuration is how long that sync took.
	LastSyncDuration time.Duration
	// SyncPending is true while a sync is in flight or a background sync is
	// scheduled.
	SyncPending bool

	Latched   bool
	LastError error // the failure that latched the log, if any

	BackgroundSyncInterval time.Duration // negative when off
	SyncBytesThreshold     int64         // negative when off

	Segments int

	// Counters since open.
	Appends         uint64 // append calls completed successfully
	Records         uint64 // records written
	Writes          uint64 // write() calls on segment files
	Syncs           uint64 // completed fdatasyncs of segment files
	BackgroundSyncs uint64 // of which started by the interval or the byte bound
	SyncedAppends   uint64 // AfterFsync appends completed by those syncs (fan-in)
	Wakeups         uint64 // append completions signalled (exactly one each)
	Backpressured   uint64 // times appends were held for the byte bound

	BackgroundSyncFailures uint64 // background syncs that failed (and latched the log)
	TailCacheHits          uint64 // records read from the tail cache
	TailCacheMisses        uint64 // records not in the tail cache: from the node's read cache or the segment files
	ReadCacheHits          uint64 // of those, records read from the node's read cache
}

// Dir is the log's directory, as Open was given it.
func (l *Log) Dir() string { return l.dir }

// Status returns a snapshot.
func (l *Log) Status() Status {
	l.statusMu.Lock()
	s := l.status
	l.statusMu.Unlock()
	s.WrittenNext = l.written.load()
	s.DurableNext = l.durable.load()
	if s.WrittenNext > s.DurableNext {
		s.DurableLagRecords = s.WrittenNext - s.DurableNext
	} else {
		s.DurableLagRecords, s.DurableLagBytes, s.OldestUnsynced = 0, 0, time.Time{}
	}
	s.Epoch = l.epoch.Load()
	s.TailCacheHits, s.TailCacheMisses = l.cacheHits.Load(), l.cacheMisses.Load()
	s.ReadCacheHits = l.readCacheHits.Load()
	l.segMu.RLock()
	s.Head, s.Segments = l.head, len(l.segs)
	l.segMu.RUnlock()
	return s
}

// updateStatus applies f to the status under its lock.
func (l *Log) updateStatus(f func(*Status)) {
	l.statusMu.Lock()
	f(&l.status)
	l.statusMu.Unlock()
}
