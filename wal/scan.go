package wal

import (
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// scanChunk is how much of a segment one read brings in during a scan.
const scanChunk = 4 << 20

// scanResult is what a scan of one segment found.
type scanResult struct {
	end   uint64           // offset after the last valid record
	pos   int64            // byte position after the last valid record
	index []indexEntry     // sparse index of the valid records
	stop  *CorruptionError // the bad record that ended the scan; nil for a clean end
}

// scanSegment validates the records of the segment starting at base, from
// its header up to the first record that does not verify, a zero header,
// the end of the file, or offset limit. It reads in large chunks with pread
// and checks the checksum, the offset and the type of every record.
// chunk is the read size, at most scanChunk (smaller for small segments).
// visit, if not nil, sees every valid record in order; its payload is valid
// only during the call.
func scanSegment(f vfs.File, base, limit uint64, maxLen, spacing int, chunk int64, visit func(Record)) (scanResult, error) {
	res := scanResult{end: base, pos: segmentHeaderSize}
	buf := make([]byte, max(min(chunk, scanChunk), 64<<10))
	lastIndex := int64(-1 << 62)
	for res.end < limit {
		n, err := f.ReadAt(buf, res.pos)
		if err != nil && !errors.Is(err, io.EOF) {
			return res, fmt.Errorf("wal: read segment %d at %d: %w", base, res.pos, err)
		}
		atEOF := n < len(buf)
		chunk := buf[:n]
		i := 0
		for res.end < limit {
			rec, used, status, reason := decodeRecord(chunk[i:], res.end, maxLen)
			if status == decodeOK {
				if p := res.pos + int64(i); p-lastIndex >= int64(spacing) {
					res.index = append(res.index, indexEntry{offset: rec.Offset, pos: p})
					lastIndex = p
				}
				if visit != nil {
					visit(rec)
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
			if status != decodeEnd {
				if status == decodeShort {
					reason = "torn record at the end of the file"
				}
				res.stop = &CorruptionError{Segment: base, Pos: res.pos, Offset: res.end, Reason: reason}
			}
			return res, nil
		}
		res.pos += int64(i)
		if i == 0 && !atEOF {
			// One record larger than the buffer: grow it to hold the record.
			need := recordHeaderSize + maxLen
			if len(buf) >= need {
				return res, fmt.Errorf("wal: scan of segment %d stuck at %d", base, res.pos)
			}
			buf = make([]byte, need)
		}
	}
	return res, nil
}
