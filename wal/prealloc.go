package wal

import (
	"errors"
	"fmt"
	"syscall"
)

// Preallocation ahead of the writer (Options.PreallocAhead). A segment's
// space is reserved with fallocate before the writer gets there:
// extending the file (the default, PreallocExtend) keeps fdatasync from
// writing a size change on every sync, and reserving keeps a full disk
// from failing a write in the middle of a batch. Reserving a whole
// segment when it is created made every idle queue cost a segment of
// disk (16 MiB at the broker's default), so a new segment reserves
// firstPreallocStep, and the writer reserves the rest (or PreallocAhead
// at a time) when it first reaches the end of that.

// firstPreallocStep is what a new segment reserves.
const firstPreallocStep = 256 << 10

// preallocEnd is where the reservation of a segment ends once it covers
// need, from have (the file's current reserved end).
func (o *Options) preallocEnd(have, need int64) int64 {
	if o.Preallocate == PreallocOff {
		return need
	}
	step := o.PreallocAhead
	if step >= o.SegmentSize {
		return o.SegmentSize // every segment reserved whole when created
	}
	if have <= segmentHeaderSize {
		step = firstPreallocStep // a new segment, or one cut back to its header
	}
	if step == 0 {
		return o.SegmentSize
	}
	return min(o.SegmentSize, max(need, have+step))
}

// reserve makes the active segment's reserved space reach need before a
// write goes past its end. A full disk refuses the append with
// ErrNoSpace before anything is written (and tries once more for need
// alone, which may still fit where a whole step does not); any other
// failure is left to the write, which reports what the disk does.
func (w *writer) reserve(need int64) error {
	if need <= w.reserved {
		return nil
	}
	end := w.opts.preallocEnd(w.reserved, need)
	err := preallocate(w.active.file, w.opts.Preallocate, w.reserved, end)
	if noSpace(err) && end > need {
		end = need
		err = preallocate(w.active.file, w.opts.Preallocate, w.reserved, end)
	}
	if noSpace(err) {
		return fmt.Errorf("%w: segment %d: %w", ErrNoSpace, w.active.base, err)
	}
	w.reserved = end
	return nil
}

// noSpace reports a full disk, or a full quota: an allocation refused,
// which a later one may not be.
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
