package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
)

// minReadChunk is the least a read from a segment file brings in, and
// maxReadChunk the most (short of one larger record): a huge budget must not
// size the buffer.
const (
	minReadChunk = 4 << 10
	maxReadChunk = 1 << 20
)

// ReadWritten returns records from offset from up to the written frontier,
// stopping before the record that would take the payload total past
// maxBytes (the first record is always returned). Payloads are shared with
// the tail cache: treat them as read-only.
func (l *Log) ReadWritten(from uint64, maxBytes int) ([]Record, error) {
	return l.read(from, l.written.load(), maxBytes)
}

// ReadDurable is ReadWritten bounded by the durable frontier.
func (l *Log) ReadDurable(from uint64, maxBytes int) ([]Record, error) {
	return l.read(from, l.durable.load(), maxBytes)
}

func (l *Log) read(from, limit uint64, maxBytes int) ([]Record, error) {
	select {
	case <-l.closing:
		return nil, ErrClosed
	default:
	}
	if head := l.Head(); from < head {
		return nil, fmt.Errorf("wal: read at %d, head %d: %w", from, head, ErrBeforeHead)
	}
	if from > limit {
		return nil, fmt.Errorf("wal: read at %d, frontier %d: %w", from, limit, ErrBeyondFrontier)
	}
	limit, err := l.boundByHoles(from, limit)
	if err != nil {
		return nil, err
	}
	var out []Record
	total := 0
	fits := func(n int) bool { return len(out) == 0 || total+n <= maxBytes }
	var blk *cachedBlock // the node cache's block of o, when it holds one
	if l.opts.ReadCache != nil {
		l.noteRead(from)
	}
	for o := from; o < limit; {
		// The tail cache, then the read-ahead chunk (its records are
		// decoded already), then the node's read cache.
		rec, ok := l.cached(o)
		inTail := ok
		var recs []Record
		if !ok {
			if recs = l.ahead.get(o); len(recs) == 0 {
				rec, ok = l.fromReadCache(&blk, o)
			}
		}
		if ok {
			if !fits(len(rec.Payload)) {
				break
			}
			out = append(out, rec)
			total += len(rec.Payload)
			o++
			if inTail {
				l.cacheHits.Add(1)
			} else {
				l.cacheMisses.Add(1)
				l.readCacheHits.Add(1)
				l.opts.ReadCache.hits.Add(1)
			}
			continue
		}
		var err error
		if len(recs) == 0 {
			recs, err = l.readSegment(o, limit, maxBytes-total)
			if err != nil && l.damageFound(err) {
				recs, err = l.readSegment(o, limit, maxBytes-total) // now meets a hole
			}
		} else if n := limit - o; uint64(len(recs)) > n {
			recs = recs[:n]
		}
		if err != nil {
			if len(out) > 0 {
				return out, nil // the caller meets the error when it reads on
			}
			return nil, err
		}
		took := 0
		for _, rec := range recs {
			if !fits(len(rec.Payload)) {
				break
			}
			out = append(out, rec)
			total += len(rec.Payload)
			took++
		}
		o += uint64(took)
		l.cacheMisses.Add(uint64(took))
		if rc := l.opts.ReadCache; rc != nil {
			rc.misses.Add(uint64(took))
		}
		if took < len(recs) {
			return out, nil
		}
		if len(recs) == 0 || total >= maxBytes {
			break
		}
	}
	return out, nil
}

// cached returns offset's record from the tail cache.
func (l *Log) cached(offset uint64) (Record, bool) {
	if l.cache == nil {
		return Record{}, false
	}
	return l.cache.get(offset)
}

// readSegment reads a run of records starting at offset from the segment
// that holds it, up to limit, bringing in about budget bytes.
func (l *Log) readSegment(offset, limit uint64, budget int) ([]Record, error) {
	seg, err := l.segmentFor(offset)
	if err != nil {
		return nil, err
	}
	defer seg.release()
	pos, err := l.locate(seg, offset)
	if err != nil {
		return nil, err
	}
	want := max(min(budget, maxReadChunk)+recordHeaderSize, l.readAhead)
	for {
		buf := make([]byte, want)
		n, err := seg.file.ReadAt(buf, pos)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("wal: read segment %d at %d: %w", seg.base, pos, err)
		}
		full := n == want
		buf = buf[:n]
		var all []Record
		at, o := 0, offset
		for o < limit && at < len(buf) {
			rec, used, status, reason := decodeRecord(buf[at:], o, l.opts.MaxRecordSize)
			if status == decodeShort && full {
				break // continues past this read
			}
			if status != decodeOK {
				if status == decodeEnd {
					reason = "end of records before the frontier"
				}
				if len(all) > 0 {
					break // report it when a read reaches it
				}
				return nil, &CorruptionError{Segment: seg.base, Pos: pos + int64(at), Offset: o, Reason: reason}
			}
			all = append(all, rec)
			at += used
			o++
		}
		if len(all) > 0 {
			// The budget's share now; the rest is kept for the next read.
			out, total := all[:1], len(all[0].Payload)
			for _, rec := range all[1:] {
				if total+len(rec.Payload) > budget {
					break
				}
				out = out[:len(out)+1]
				total += len(rec.Payload)
			}
			if len(out) < len(all) {
				l.ahead.put(all[len(out):])
			}
			return out, nil
		}
		if o >= limit {
			return nil, nil
		}
		// One record larger than the read: its header says how large.
		need := recordHeaderSize + l.opts.MaxRecordSize
		if len(buf) >= 4 {
			need = min(need, recordHeaderSize+int(binary.LittleEndian.Uint32(buf)))
		}
		if !full || want >= need {
			return nil, &CorruptionError{Segment: seg.base, Pos: pos, Offset: offset, Reason: "torn record"}
		}
		want = need
	}
}

// segmentFor finds the segment holding offset and takes a reference on it.
func (l *Log) segmentFor(offset uint64) (*segment, error) {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	if offset < l.head {
		return nil, fmt.Errorf("wal: read at %d, head %d: %w", offset, l.head, ErrBeforeHead)
	}
	if h, ok := l.holeAtLocked(offset); ok {
		return nil, &HoleError{Hole: h}
	}
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base > offset })
	if i == 0 {
		return nil, fmt.Errorf("wal: no segment holds offset %d: %w", offset, ErrBeforeHead)
	}
	seg := l.segs[i-1]
	seg.acquire()
	return seg, nil
}

// locate returns the byte position of offset in seg: a binary search of the
// sparse index, then a scan of at most one index interval. A sealed segment
// not indexed yet is scanned first; damage that scan finds becomes holes,
// and an offset in one of them fails with its *HoleError.
func (l *Log) locate(seg *segment, offset uint64) (int64, error) {
	seg.mu.Lock()
	if !seg.indexed {
		res, err := scanSegment(seg.file, seg.base, seg.end, scanSealed, l.opts.MaxRecordSize, l.opts.IndexSpacing, l.opts.SegmentSize, nil)
		if err != nil {
			seg.mu.Unlock()
			return 0, err
		}
		seg.index, seg.indexed = res.index, true
		for _, h := range l.registerDamage(seg.file, seg.path, res.damage) {
			if offset >= h.From && offset < h.To {
				seg.mu.Unlock()
				return 0, &HoleError{Hole: h}
			}
		}
	}
	if c := seg.corrupt; c != nil && offset >= c.Offset {
		seg.mu.Unlock()
		return 0, c
	}
	e := seg.lookupLocked(offset)
	seg.mu.Unlock()
	if e.offset == offset {
		return e.pos, nil
	}
	// Scan forward from the index entry.
	buf := make([]byte, l.opts.IndexSpacing+recordHeaderSize+minReadChunk)
	pos, o := e.pos, e.offset
	for {
		n, err := seg.file.ReadAt(buf, pos)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("wal: read segment %d at %d: %w", seg.base, pos, err)
		}
		at := 0
		for at < n {
			if o == offset {
				return pos + int64(at), nil
			}
			_, used, status, reason := decodeRecord(buf[at:n], o, l.opts.MaxRecordSize)
			if status == decodeShort && n == len(buf) {
				break
			}
			if status != decodeOK {
				return 0, &CorruptionError{Segment: seg.base, Pos: pos + int64(at), Offset: o, Reason: "index scan: " + reason}
			}
			at += used
			o++
		}
		if o == offset {
			return pos + int64(at), nil
		}
		if at == 0 {
			buf = make([]byte, 2*len(buf))
			continue
		}
		pos += int64(at)
	}
}

// CachedFrom is the lowest offset the tail cache holds: reads from there to
// the written frontier are served from memory, reads below it go to the
// segment files. An empty cache reports WrittenNext; ok is false when the
// cache is off.
func (l *Log) CachedFrom() (from uint64, ok bool) {
	if l.cache == nil {
		return 0, false
	}
	if from, held := l.cache.from(); held {
		return from, true
	}
	return l.written.load(), true
}
