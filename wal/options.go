package wal

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Prealloc says how a new segment reserves its space.
type Prealloc int

const (
	// PreallocDefault picks the measured winner, PreallocExtend.
	PreallocDefault Prealloc = iota
	// PreallocExtend allocates ahead of the writer and sets the file size
	// with each reservation (fallocate mode 0). Zeros mark the end of the
	// records, so only the fdatasync after a reservation has a size change
	// to write.
	PreallocExtend
	// PreallocKeepSize reserves the blocks without changing the file size
	// (fallocate FALLOC_FL_KEEP_SIZE): the valid bytes end at EOF.
	PreallocKeepSize
	// PreallocOff reserves nothing.
	PreallocOff
)

func (p Prealloc) String() string {
	switch p {
	case PreallocDefault:
		return "default"
	case PreallocExtend:
		return "extend"
	case PreallocKeepSize:
		return "keep-size"
	case PreallocOff:
		return "off"
	}
	return fmt.Sprintf("prealloc(%d)", int(p))
}

// ParsePrealloc reads a Prealloc from its String form.
func ParsePrealloc(s string) (Prealloc, error) {
	for _, p := range []Prealloc{PreallocDefault, PreallocExtend, PreallocKeepSize, PreallocOff} {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("wal: unknown preallocation %q (want default, extend, keep-size or off)", s)
}

// Defaults for the zero Options.
const (
	DefaultSegmentSize            = 64 << 20
	DefaultIndexSpacing           = 4 << 10
	DefaultBackgroundSyncInterval = 100 * time.Millisecond
	DefaultSyncBytesThreshold     = 4 << 20
	DefaultTailCacheBytes         = 8 << 20
	DefaultMaxRecordSize          = 8 << 20
	// DefaultScrubBytesPerSecond is the scrub rate a long-running owner of
	// logs (the broker) should pass: a 64 MiB segment in 8 s, a small
	// share of an SD card's or eMMC's read bandwidth.
	DefaultScrubBytesPerSecond = 8 << 20
	// minSegmentSize keeps tests able to force rollovers with tiny segments.
	minSegmentSize = 4 << 10
)

// Options configure a log. The zero value of every field means its default.
type Options struct {
	// FS is the file system the log lives on. Default: vfs.Default. Tests pass
	// pebble's crashable in-memory FS or an errorfs wrapper.
	FS vfs.FS
	// SegmentSize is the size at which the active segment rolls over.
	// Default 64 MiB. Recovery scans at most one segment in full.
	SegmentSize int64
	// IndexSpacing is the distance in bytes between sparse index entries.
	// Default 4 KiB.
	IndexSpacing int
	// Preallocate picks how new segments reserve space. Default PreallocExtend.
	Preallocate Prealloc
	// LockInProcess keeps only this process's other Opens of the
	// directory out, with no LOCK file and no descriptor held: for a
	// caller whose own lock keeps other processes out of a tree of logs,
	// as the broker's lock on its data directory does, and which opens
	// many logs. Default false: a LOCK file, locked and held open while
	// the log is, which keeps every other process out too.
	LockInProcess bool
	// PreallocAhead is how much space a segment in use reserves ahead of
	// the writer at once. A new segment reserves 256 KiB (so an idle log
	// costs that much disk, not a segment); once the writer reaches the end
	// of it, the segment reserves PreallocAhead more, and so on. Default 0:
	// the rest of the segment at once (the fewest reservations, and the
	// fewest syncs with a size change to write). At or above SegmentSize,
	// every segment is reserved whole when created, as before
	// (docs/performance.md compares the two).
	PreallocAhead int64
	// BackgroundSyncInterval is the target time between background syncs of
	// written records. Default 100 ms; negative turns the timer off.
	BackgroundSyncInterval time.Duration
	// SyncBytesThreshold starts a background sync once this many bytes are
	// written but not synced, and past twice this AfterFlush appends wait for
	// the sync. Default 4 MiB; negative turns the bound off.
	SyncBytesThreshold int64
	// TailCacheBytes budgets the cache of recently written records that
	// serves reads before the segment files. Default 8 MiB; negative
	// turns the cache off.
	TailCacheBytes int64
	// ReadCache, if set, is the node's read cache, shared with other logs:
	// it takes the blocks leaving the tail cache and the blocks read from
	// segment files, and serves reads that miss the tail cache. Nil: none.
	ReadCache *ReadCache
	// SyncGroup, if set, is the node's group of logs whose syncs share
	// syncs of their file system when several ask at once (syncgroup.go):
	// background syncs (the interval's and the byte bound's) in one lane,
	// the syncs appends wait for in another. Nil: every log syncs its own
	// file.
	SyncGroup *SyncGroup
	// MaxRecordSize caps one record's payload. Default 8 MiB.
	MaxRecordSize int
	// OnRecover, if set, sees every record that recovery keeps in the active
	// segment, in offset order, while Open scans it: a caller that rebuilds
	// state from the log can do so in the same single read. The payload is
	// valid only during the call. Records of sealed segments are not
	// visited; read them as usual.
	OnRecover func(Record)
	// ScrubBytesPerSecond, when above zero, starts a scrub after Open: one
	// pass over the sealed segments in the background, at most this many
	// bytes per second, that verifies every record and quarantines damaged
	// ranges it finds (scrub.go). Zero, the default, turns it off, so that
	// a log opened by a tool or a test does no I/O it did not ask for;
	// DefaultScrubBytesPerSecond is the rate to pass otherwise.
	ScrubBytesPerSecond int64
	// OnScrub, if set, is called once the scrub pass ends, on the scrub's
	// goroutine, with what it found.
	OnScrub func(ScrubReport)
	// OnSync, if set, is called after every fdatasync of a segment file
	// (background, requested or inline at rollover and close) with how long
	// it took and its error; syncs that SyncGroup shares are not
	// fdatasyncs of the log's and are not reported. It runs on the log's
	// own goroutines, outside its locks, and must return quickly: metrics,
	// not I/O.
	OnSync func(took time.Duration, err error)
	// OnSyncCompleted, if set, is called after a successful fdatasync
	// completed AfterFsync appends, with how many (the group commit's fan-
	// in: one sync, many appends confirmed). Syncs that completed none (a
	// buffered log's background syncs) are not reported. It runs on the
	// log's writer goroutine and must return quickly.
	OnSyncCompleted func(appends int)
	// Logger receives warnings (recovery cuts, latches). Default slog.Default().
	Logger *slog.Logger
}

// Validate reports options that cannot work.
func (o Options) Validate() error {
	switch {
	case o.SegmentSize != 0 && o.SegmentSize < minSegmentSize:
		return fmt.Errorf("wal: segment size %d is below the minimum %d", o.SegmentSize, minSegmentSize)
	case o.IndexSpacing < 0:
		return fmt.Errorf("wal: negative index spacing %d", o.IndexSpacing)
	case o.Preallocate < PreallocDefault || o.Preallocate > PreallocOff:
		return fmt.Errorf("wal: unknown preallocation %d", o.Preallocate)
	case o.PreallocAhead < 0:
		return fmt.Errorf("wal: negative preallocation step %d", o.PreallocAhead)
	case o.ScrubBytesPerSecond < 0:
		return fmt.Errorf("wal: negative scrub rate %d", o.ScrubBytesPerSecond)
	case o.MaxRecordSize < 0 || o.MaxRecordSize > maxPayload:
		return fmt.Errorf("wal: max record size %d outside 0..%d", o.MaxRecordSize, maxPayload)
	}
	return nil
}

// withDefaults fills in every zero field.
func (o Options) withDefaults() Options {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	if o.IndexSpacing == 0 {
		o.IndexSpacing = DefaultIndexSpacing
	}
	if o.Preallocate == PreallocDefault {
		o.Preallocate = PreallocExtend
	}
	if o.BackgroundSyncInterval == 0 {
		o.BackgroundSyncInterval = DefaultBackgroundSyncInterval
	}
	if o.SyncBytesThreshold == 0 {
		o.SyncBytesThreshold = DefaultSyncBytesThreshold
	}
	if o.TailCacheBytes == 0 {
		o.TailCacheBytes = DefaultTailCacheBytes
	}
	if o.MaxRecordSize == 0 {
		o.MaxRecordSize = DefaultMaxRecordSize
	}
	if max := int(o.SegmentSize) - segmentHeaderSize - recordHeaderSize; o.MaxRecordSize > max {
		o.MaxRecordSize = max
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}
