package wal

import (
	"errors"
	"fmt"
	"io"
)

// scanChunk is how much of a segment one read brings in during a scan.
const scanChunk = 4 << 20

// scanMode says what a scan makes of a record that does not verify.
type scanMode int

const (
	// scanActive is the active segment's scan: zeros end the records
	// (preallocated space), and a bad record is a torn tail unless valid
	// records follow it with no zeroed sector between (see resync).
	scanActive scanMode = iota
	// scanSealed is a sealed segment's scan: its records must reach the
	// limit, so zeros or a bad record before it are damage, and when no
	// valid record follows, everything up to the limit is lost.
	scanSealed
)

// scanResult is what a scan of one segment found.
type scanResult struct {
	end    uint64           // offset after the last valid record
	pos    int64            // byte position after the last valid record
	index  []indexEntry     // sparse index of the valid records
	damage []Damage         // damaged ranges the scan skipped, in order
	stop   *CorruptionError // the torn tail that ended the scan; nil for a clean end
}

// scanSegment validates the records of the segment starting at base, from
// its header up to a zero header (active mode), the end of the file, or
// offset limit. It reads in large chunks with pread and checks the
// checksum, the offset and the type of every record. At a record that does
// not verify it looks for the next valid record (resync): found, the bytes
// between are a Damage and the scan goes on from there; not found, an
// active segment stops there (a torn tail) and a sealed one loses
// everything up to limit. chunk is the read size, at most scanChunk.
// visit, if not nil, sees every valid record in order; its payload is valid
// only during the call.
func scanSegment(r io.ReaderAt, base, limit uint64, mode scanMode, maxLen, spacing int, chunk int64, visit func(Record)) (scanResult, error) {
	s := &scanner{r: r, base: base, limit: limit, maxLen: maxLen, spacing: spacing, visit: visit,
		buf: make([]byte, max(min(chunk, scanChunk), 64<<10)), lastIndex: -1 << 62}
	s.res = scanResult{end: base, pos: segmentHeaderSize}
	for {
		status, reason, err := s.records()
		if err != nil || status == decodeOK {
			return s.res, err
		}
		if status == decodeEnd && mode == scanActive {
			return s.res, nil // the clean end of the records
		}
		switch status {
		case decodeEnd:
			reason = "zeros before the end of the segment"
		case decodeShort:
			reason = "torn record at the end of the file"
		}
		bad := &CorruptionError{Segment: base, Pos: s.res.pos, Offset: s.res.end, Reason: reason}
		next, err := resync(r, s.res.pos, s.res.end, limit, maxLen, mode == scanActive)
		if err != nil {
			return s.res, fmt.Errorf("wal: resync segment %d after byte %d: %w", base, s.res.pos, err)
		}
		switch {
		case next.found:
			s.res.damage = append(s.res.damage, Damage{Segment: base, Pos: bad.Pos, End: next.pos,
				From: bad.Offset, To: next.offset, Reason: reason})
			s.res.pos, s.res.end = next.pos, next.offset
			s.lastIndex = -1 << 62 // index the first record after the damage
		case mode == scanActive || limit == ^uint64(0):
			s.res.stop = bad // a torn tail: nothing valid follows it
			return s.res, nil
		default:
			s.res.damage = append(s.res.damage, Damage{Segment: base, Pos: bad.Pos, End: max(next.dataEnd, bad.Pos+1),
				From: bad.Offset, To: limit, Reason: reason})
			s.res.pos, s.res.end = max(next.dataEnd, bad.Pos+1), limit
			return s.res, nil
		}
	}
}

// scanner is one scan's state.
type scanner struct {
	r               io.ReaderAt
	base, limit     uint64
	maxLen, spacing int
	visit           func(Record)
	buf             []byte // the chunk being decoded
	spare           []byte // the next chunk's, read ahead while buf is decoded
	ahead           chan aheadRead
	lastIndex       int64
	res             scanResult
}

// aheadRead is the result of a read of the next chunk into spare, made on
// a goroutine of its own while the scanner decodes buf. Reads never
// overlap: the scanner waits for the one ahead before any other read of r.
type aheadRead struct {
	off int64
	n   int
	err error
}

// records decodes records from res.pos until one does not decode (its
// status and reason) or the limit is reached (decodeOK).
func (s *scanner) records() (decodeStatus, string, error) {
	defer s.settle()
	res := &s.res
	whole := false // read a whole buffer at res.pos, not what was read ahead
	for res.end < s.limit {
		chunk, atEOF, err := s.read(res.pos, whole)
		if err != nil {
			return 0, "", fmt.Errorf("wal: read segment %d at %d: %w", s.base, res.pos, err)
		}
		whole = false
		if !atEOF {
			s.readAhead(res.pos, chunk)
		}
		i := 0
		for res.end < s.limit {
			rec, used, status, reason := decodeRecord(chunk[i:], res.end, s.maxLen)
			if status == decodeOK {
				if p := res.pos + int64(i); p-s.lastIndex >= int64(s.spacing) {
					res.index = append(res.index, indexEntry{offset: rec.Offset, pos: p})
					s.lastIndex = p
				}
				if s.visit != nil {
					s.visit(rec)
				}
				i += used
				res.end++
				continue
			}
			// A header cut by the chunk's end continues in the next chunk,
			// even when its bytes so far are zeros (the low bytes of a length).
			cutHeader := status == decodeEnd && len(chunk)-i < recordHeaderSize
			if (status == decodeShort || cutHeader) && !atEOF {
				break // the record continues in the next chunk
			}
			res.pos += int64(i)
			return status, reason, nil
		}
		res.pos += int64(i)
		if i == 0 && !atEOF && len(chunk) < len(s.buf) {
			whole = true // the chunk read ahead cut the record: read it whole
			continue
		}
		if i == 0 && !atEOF {
			// One record larger than the buffer: grow it to hold the record.
			need := recordHeaderSize + s.maxLen
			if len(s.buf) >= need {
				return 0, "", fmt.Errorf("wal: scan of segment %d stuck at %d", s.base, res.pos)
			}
			s.buf = make([]byte, need)
		}
	}
	return decodeOK, "", nil
}

// read returns the segment's bytes from pos, and whether they reach the
// end of the file: the chunk read ahead when it holds pos, else a chunk
// read now into buf (always when whole).
func (s *scanner) read(pos int64, whole bool) ([]byte, bool, error) {
	if s.ahead != nil {
		a := <-s.ahead
		s.ahead = nil
		if !whole && pos >= a.off && pos < a.off+int64(a.n) {
			if a.err != nil && !errors.Is(a.err, io.EOF) {
				return nil, false, a.err
			}
			s.buf, s.spare = s.spare, s.buf
			return s.buf[pos-a.off : a.n], a.n < len(s.buf), nil
		}
	}
	n, err := s.r.ReadAt(s.buf, pos)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, false, err
	}
	return s.buf[:n], n < len(s.buf), nil
}

// readAhead starts reading the chunk after the one at pos on a goroutine
// of its own, into spare. It starts a sixteenth of a buffer before the
// current chunk's end, so that a record the current chunk cuts is whole in
// the next one unless it is longer than that. A chunk that ends in zeros
// most likely holds the end of the records (an active segment's
// preallocated space follows them), so nothing is read after it.
func (s *scanner) readAhead(pos int64, chunk []byte) {
	if len(chunk) < recordHeaderSize || allZero(chunk[len(chunk)-recordHeaderSize:]) {
		return
	}
	if s.spare == nil {
		s.spare = make([]byte, len(s.buf))
	}
	off := pos + int64(len(chunk)) - int64(len(s.buf)/16)
	if off <= pos {
		return
	}
	r, buf, done := s.r, s.spare, make(chan aheadRead, 1)
	s.ahead = done
	go func() {
		n, err := r.ReadAt(buf, off)
		done <- aheadRead{off: off, n: n, err: err}
	}()
}

// settle waits for a read ahead that the scan will not use, so that no
// read of the segment outlives the scan.
func (s *scanner) settle() {
	if s.ahead != nil {
		<-s.ahead
		s.ahead = nil
	}
}
