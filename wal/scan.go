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
	size := max(min(chunk, scanChunk), 64<<10)
	s := &scanner{r: r, base: base, limit: limit, maxLen: maxLen, spacing: spacing, visit: visit,
		size: int(size), room: int(size / 8), lastIndex: -1 << 62}
	s.buf = make([]byte, s.room+s.size)
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
//
// While it decodes one chunk it reads the next on a goroutine of its own
// (readAhead), from the end of the one it decodes. What the chunk holds
// of a record it cuts is copied in front of the next, into room bytes kept
// free there, so the next chunk holds the record whole; when that part is
// longer than the room, the next chunk is read again from the record's
// start instead, as every chunk is once reads ahead have missed twice, or
// once a record longer than a chunk made the scan grow its buffer. Reads
// never overlap: the scanner waits for the one ahead before any other
// read of r.
type scanner struct {
	r               io.ReaderAt
	base, limit     uint64
	maxLen, spacing int
	visit           func(Record)
	size, room      int    // a chunk's read size; the bytes kept free before it
	buf             []byte // room+size: the chunk decoded, read into buf[room:]
	bufPos          int64  // the segment position of buf[room]
	bufN            int    // the bytes read into buf[room:]
	spare           []byte // room+size: the next chunk, read ahead
	ahead           chan aheadRead
	misses          int    // reads ahead that did not hold what the scan needed
	big             []byte // the buffer grown for a record longer than a chunk
	lastIndex       int64
	res             scanResult
}

// aheadRead is the result of a read ahead into spare[room:].
type aheadRead struct {
	pos int64
	n   int
	err error
}

// records decodes records from res.pos until one does not decode (its
// status and reason) or the limit is reached (decodeOK).
func (s *scanner) records() (decodeStatus, string, error) {
	defer s.settle()
	res := &s.res
	for res.end < s.limit {
		chunk, atEOF, err := s.read(res.pos)
		if err != nil {
			return 0, "", fmt.Errorf("wal: read segment %d at %d: %w", s.base, res.pos, err)
		}
		if !atEOF {
			s.readAhead()
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
		if i == 0 && !atEOF {
			// One record longer than the chunk: grow a buffer to hold it.
			need := recordHeaderSize + s.maxLen
			if len(chunk) >= need {
				return 0, "", fmt.Errorf("wal: scan of segment %d stuck at %d", s.base, res.pos)
			}
			s.big = make([]byte, need)
		}
	}
	return decodeOK, "", nil
}

// read returns the segment's bytes from pos, and whether they reach the
// end of the file: the chunk read ahead, behind what the current chunk
// left of the record it cut, when that fits in the room; else a chunk
// read now.
func (s *scanner) read(pos int64) ([]byte, bool, error) {
	if s.ahead != nil {
		a := <-s.ahead
		s.ahead = nil
		cut := a.pos - pos // what the current chunk cut, copied in front
		if s.big == nil && cut >= 0 && cut <= int64(s.room) && pos >= s.bufPos {
			if a.err != nil {
				return nil, false, a.err
			}
			from := s.room + int(pos-s.bufPos)
			copy(s.spare[s.room-int(cut):s.room], s.buf[from:from+int(cut)])
			s.buf, s.spare = s.spare, s.buf
			s.bufPos, s.bufN = a.pos, a.n
			return s.buf[s.room-int(cut) : s.room+a.n], a.n < s.size, nil
		}
		s.misses++
	}
	if s.big != nil {
		n, err := readChunk(s.r, s.big, pos)
		if err != nil {
			return nil, false, err
		}
		return s.big[:n], n < len(s.big), nil
	}
	n, err := readChunk(s.r, s.buf[s.room:], pos)
	if err != nil {
		return nil, false, err
	}
	s.bufPos, s.bufN = pos, n
	return s.buf[s.room : s.room+n], n < s.size, nil
}

// readAhead starts reading the chunk after the current one on a goroutine
// of its own, into spare. A chunk that ends in zeros most likely holds the
// end of the records (an active segment's preallocated space follows
// them), so nothing is read after it.
func (s *scanner) readAhead() {
	tail := s.buf[s.room : s.room+s.bufN]
	if s.big != nil || s.misses >= 2 || len(tail) < recordHeaderSize || allZero(tail[len(tail)-recordHeaderSize:]) {
		return
	}
	if s.spare == nil {
		s.spare = make([]byte, s.room+s.size)
	}
	r, into, pos, done := s.r, s.spare[s.room:], s.bufPos+int64(s.bufN), make(chan aheadRead, 1)
	s.ahead = done
	go func() {
		n, err := readChunk(r, into, pos)
		done <- aheadRead{pos: pos, n: n, err: err}
	}()
}

// readChunk reads p from pos; the end of the file is not an error (the
// bytes read say where it is).
func readChunk(r io.ReaderAt, p []byte, pos int64) (int, error) {
	n, err := r.ReadAt(p, pos)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

// settle waits for a read ahead that the scan will not use, so that no
// read of the segment outlives the scan.
func (s *scanner) settle() {
	if s.ahead != nil {
		<-s.ahead
		s.ahead = nil
	}
}
