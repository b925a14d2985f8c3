package wal

import (
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// VerifyOptions configure Verify. The zero value checks the whole log.
type VerifyOptions struct {
	// From skips the segments that end at or below this offset (whole
	// segments only: Visit may still see records below From).
	From uint64
	// To stops the scan at this offset, exclusive. 0: no limit.
	To uint64
	// Visit, if not nil, sees every valid record in offset order; its
	// payload is valid only during the call.
	Visit func(Record)
	// Progress, if not nil, is called after each segment with the bytes
	// of segment files scanned so far and in all.
	Progress func(scanned, total int64)
}

// SegmentReport is what Verify found in one segment file.
type SegmentReport struct {
	Base    uint64 // offset of its first record, from the file name
	Size    int64  // file size in bytes (preallocated space included)
	Records uint64 // valid records
	End     uint64 // offset after its last valid record
	Pos     int64  // byte position after its last valid record
	// Stop is the bad record or header that ended the scan; nil when the
	// segment ended cleanly.
	Stop *CorruptionError
	// TornTail: Stop is in the last segment and nothing but zeros follows
	// the bad record, as after a write cut short by a crash. Open cuts a
	// torn tail without losing a confirmed durable record.
	TornTail bool
	// Damaged lists the damaged ranges the scan skipped: bad records with
	// valid records after them (or a sealed segment's end). Open keeps the
	// records after each and turns its offsets into a hole.
	Damaged []Damage
}

// VerifyReport is the outcome of Verify.
type VerifyReport struct {
	Segments []SegmentReport
	Records  uint64 // valid records in all segments
	Bytes    int64  // bytes of segment files
	// Quarantined lists the bases of segments set aside as corrupt
	// (files named *.seg.quarantined); their records are not scanned.
	Quarantined []uint64
	// PendingCut is set when latched-cut.pending exists: the next Open
	// cuts the log back to CutTo.
	PendingCut bool
	CutTo      uint64
	// Corrupt lists every problem that is not a torn tail: bad headers,
	// the start of every damaged range, and sealed segments that end
	// before the next begins.
	Corrupt []*CorruptionError
	// Damaged lists the damaged ranges of all segments, in offset order.
	Damaged []Damage
	// LostRecords counts the records the damage costs: the offsets of the
	// damaged ranges, of sealed segments whose header is corrupt, and of
	// quarantined segments. A torn tail is not counted.
	LostRecords uint64
}

// TornTail returns the torn tail of the last segment, or nil.
func (r *VerifyReport) TornTail() *CorruptionError {
	for _, s := range r.Segments {
		if s.TornTail {
			return s.Stop
		}
	}
	return nil
}

// Verify checks every segment of the log in dir without changing
// anything: it opens the files read-only, takes no lock and repairs
// nothing, so it may run on a log another process has open (records
// being appended may then read as a torn tail). It returns an error only
// when it cannot read the log; what it finds is in the report.
func Verify(fs vfs.FS, dir string, opts VerifyOptions) (VerifyReport, error) {
	var rep VerifyReport
	names, err := fs.List(dir)
	if err != nil {
		return rep, fmt.Errorf("wal: list %s: %w", dir, err)
	}
	var bases []uint64
	sizes := map[uint64]int64{}
	for _, name := range names {
		if base, ok := parseSegmentName(name); ok {
			info, err := fs.Stat(fs.PathJoin(dir, name))
			if err != nil {
				return rep, fmt.Errorf("wal: stat %s: %w", name, err)
			}
			bases, sizes[base] = append(bases, base), info.Size()
			rep.Bytes += info.Size()
		} else if base, ok := parseQuarantinedName(name); ok {
			rep.Quarantined = append(rep.Quarantined, base)
		}
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	sort.Slice(rep.Quarantined, func(i, j int) bool { return rep.Quarantined[i] < rep.Quarantined[j] })
	if rep.CutTo, rep.PendingCut, err = readCutMarker(fs, dir); err != nil {
		return rep, err
	}
	limit := opts.To
	if limit == 0 {
		limit = ^uint64(0)
	}
	var scanned int64
	for i, base := range bases {
		last := i == len(bases)-1
		next := ^uint64(0)
		if !last {
			next = nextBase(base, bases[i+1], rep.Quarantined)
		}
		if base >= limit {
			break
		}
		if next <= opts.From && !last {
			scanned += sizes[base]
			continue
		}
		seg, err := verifySegment(fs, dir, base, min(next, limit), sizes[base], last, opts.Visit)
		if err != nil {
			return rep, err
		}
		if !last && seg.Stop == nil && seg.End < min(next, limit) {
			seg.Stop = &CorruptionError{Segment: base, Pos: seg.Pos, Offset: seg.End,
				Reason: fmt.Sprintf("sealed segment ends before the next one starts at %d", next)}
		}
		for _, d := range seg.Damaged {
			rep.Corrupt = append(rep.Corrupt, d.Err())
			rep.Damaged = append(rep.Damaged, d)
			rep.LostRecords += d.Lost()
		}
		if seg.Stop != nil && !seg.TornTail {
			rep.Corrupt = append(rep.Corrupt, seg.Stop)
			if !last && seg.Stop.Pos == 0 {
				rep.LostRecords += min(next, limit) - base // a bad header: the whole segment
			}
		}
		rep.Records += seg.Records
		rep.Segments = append(rep.Segments, seg)
		scanned += sizes[base]
		if opts.Progress != nil {
			opts.Progress(scanned, rep.Bytes)
		}
	}
	for _, h := range findHoles(fs, dir, rep.Quarantined, bases) {
		rep.LostRecords += h.To - h.From
	}
	return rep, nil
}

// verifySegment checks one segment's header and records up to limit.
func verifySegment(fs vfs.FS, dir string, base, limit uint64, size int64, last bool, visit func(Record)) (SegmentReport, error) {
	seg := SegmentReport{Base: base, Size: size, End: base}
	f, err := fs.Open(fs.PathJoin(dir, segmentName(base)))
	if err != nil {
		return seg, fmt.Errorf("wal: open segment %d: %w", base, err)
	}
	defer f.Close()
	h := make([]byte, segmentHeaderSize)
	n, err := f.ReadAt(h, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return seg, fmt.Errorf("wal: read segment %d header: %w", base, err)
	}
	if last && allZero(h[:n]) {
		return seg, nil // created but never synced: Open gives it a header
	}
	if err := checkSegmentHeader(h[:n], base); err != nil {
		errors.As(err, &seg.Stop)
		return seg, nil
	}
	mode := scanSealed
	if last {
		mode = scanActive
	}
	res, err := scanSegment(f, base, limit, mode, maxPayload, 1<<30, size, visit)
	if err != nil {
		return seg, err
	}
	seg.End, seg.Pos, seg.Stop, seg.Damaged = res.end, res.pos, res.stop, res.damage
	seg.Records = res.end - base
	for _, d := range res.damage {
		seg.Records -= d.Lost()
	}
	if last && res.stop != nil {
		seg.TornTail, err = zerosAfterRecord(f, res.pos, size)
		if err != nil {
			return seg, err
		}
	}
	return seg, nil
}

// zerosAfterRecord reports whether everything past the bad record at pos
// is zeros. The record's extent comes from its length when that is
// plausible, else it is taken to end at the next 4 KiB boundary.
func zerosAfterRecord(f vfs.File, pos, size int64) (bool, error) {
	h := make([]byte, recordHeaderSize)
	n, err := f.ReadAt(h, pos)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("wal: read at %d: %w", pos, err)
	}
	end := (pos/4096 + 1) * 4096
	if n == recordHeaderSize {
		if l := int64(h[0]) | int64(h[1])<<8 | int64(h[2])<<16 | int64(h[3])<<24; l <= maxPayload {
			end = pos + recordHeaderSize + l
		}
	}
	buf := make([]byte, 64<<10)
	for p := end; p < size; p += int64(len(buf)) {
		n, err := f.ReadAt(buf, p)
		if err != nil && !errors.Is(err, io.EOF) {
			return false, fmt.Errorf("wal: read at %d: %w", p, err)
		}
		if !allZero(buf[:n]) {
			return false, nil
		}
		if n < len(buf) {
			break
		}
	}
	return true, nil
}
