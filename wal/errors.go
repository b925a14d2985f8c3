package wal

import (
	"errors"
	"fmt"
)

// Sentinel errors. Compare with errors.Is; the log wraps them with context.
var (
	// ErrClosed is returned by every call on a closed log.
	ErrClosed = errors.New("wal: closed")
	// ErrLatched is returned by appends, syncs and seals once a write or sync
	// has failed. The log stays latched until it is closed and reopened, and
	// the reopen cuts it back to its last successful sync.
	ErrLatched = errors.New("wal: latched after a storage failure")
	// ErrBeforeHead is returned by a read that starts below the head.
	ErrBeforeHead = errors.New("wal: offset is below the head")
	// ErrBeyondFrontier is returned by a read that starts past the frontier it
	// reads up to.
	ErrBeyondFrontier = errors.New("wal: offset is beyond the frontier")
	// ErrInvalidType is returned for an entry with record type zero, which is
	// reserved so that zero-filled space reads as the end of the log.
	ErrInvalidType = errors.New("wal: record type 0 is invalid")
	// ErrTooLarge is returned for a record or batch that cannot fit in a
	// segment or exceeds the maximum record size.
	ErrTooLarge = errors.New("wal: record or batch too large")
	// ErrEmptyBatch is returned by an append with no entries.
	ErrEmptyBatch = errors.New("wal: empty batch")
	// ErrEpochNotAdvanced is returned by Seal when the epoch is not above the
	// current one.
	ErrEpochNotAdvanced = errors.New("wal: seal epoch must advance")
	// ErrHeadBeyondDurable is returned when retention would move the head past
	// the durable frontier.
	ErrHeadBeyondDurable = errors.New("wal: head cannot pass the durable frontier")
	// ErrNotEmpty is returned by Rebase on a log that holds records.
	ErrNotEmpty = errors.New("wal: log holds records")
	// ErrCorrupt is matched by every *CorruptionError.
	ErrCorrupt = errors.New("wal: corrupt record")
	// ErrNoSpace is returned by an append that needed more space (a new
	// segment, or the next preallocation step of the active one) when the
	// file system had no room for it. Nothing was written and the log
	// stays healthy: appends succeed again once space is freed. (A write
	// that fails for want of space in reserved space, which the file
	// system should not do, latches the log instead, since it may have
	// written part of a record.)
	ErrNoSpace = errors.New("wal: no space to grow the log")
	// ErrLocked is returned by Open when another process holds the log
	// (or, with Options.LockInProcess, another Open of this process).
	ErrLocked = errors.New("wal: log directory is locked by another user")
)

// CorruptionError says where a segment stops making sense. Segment is the base
// offset of the segment file, Pos the byte position within it, and Offset the
// log offset that was expected there.
type CorruptionError struct {
	Segment uint64
	Pos     int64
	Offset  uint64
	Reason  string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("wal: corrupt segment %020d at byte %d (expected offset %d): %s",
		e.Segment, e.Pos, e.Offset, e.Reason)
}

// Is makes errors.Is(err, ErrCorrupt) true for every corruption error.
func (e *CorruptionError) Is(target error) bool { return target == ErrCorrupt }

// StorageError wraps a failed write or sync, the failure that latches the log.
type StorageError struct {
	Op  string // "write", "sync", "create segment", ...
	Err error
}

func (e *StorageError) Error() string { return fmt.Sprintf("wal: %s failed: %v", e.Op, e.Err) }
func (e *StorageError) Unwrap() error { return e.Err }
