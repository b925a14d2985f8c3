package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Resync. A record that does not verify is either a torn tail (a write cut
// short: nothing valid after it) or damage (a flipped bit, an overwritten
// range: valid records after it). Records carry their offset and a CRC32C,
// so the next valid record after a bad one can be found by trying every
// byte position after it: the first position where a record decodes,
// verifies and carries a plausible offset is where the records go on.
//
// Plausible: at or above the offset expected at the bad record, below the
// scan's limit, and at most one above per recordHeaderSize bytes skipped
// (the offsets lost must have fitted in the damaged bytes). That bound
// keeps a stale record of an earlier incarnation, or one quoted inside a
// payload, from swallowing the offsets of the records after it.
//
// Torn writes are told apart from damage as etcd's wal tells them: space a
// write never reached reads as zeros, whole sectors of them, and a bit flip
// or a garbled range does not zero an aligned sector. In the active
// segment, an aligned all-zero sector between the bad record and the next
// valid one makes the bad record a torn tail: records after it were
// written after the last sync and some of what came before them never
// reached the disk, so the log is cut there as before. So is a bad record
// whose bytes up to the next sector boundary are all zero, however few
// (etcd's rule too): the sector holding its start kept its old content
// while a later one was written, and no bit flip or garbled range zeroes a
// record's bytes exactly up to a sector boundary.

// sectorSize is the unit a disk writes atomically, and the size of the
// zeroed runs a torn write leaves.
const sectorSize = 512

// resyncChunk is how much one read of the resync search brings in.
const resyncChunk = 256 << 10

// resyncResult is where a resync search found the records going on.
type resyncResult struct {
	found   bool
	pos     int64  // byte position of the next valid record
	offset  uint64 // its offset
	dataEnd int64  // not found: the position after the last non-zero byte searched
}

// resync searches the bytes after the bad record at pos (which was
// expected to carry offset want) for the next valid record with a
// plausible offset below limit. tornRule stops the search at the first
// aligned all-zero sector: a torn write.
func resync(r io.ReaderAt, pos int64, want, limit uint64, maxLen int, tornRule bool) (resyncResult, error) {
	res := resyncResult{dataEnd: pos}
	if tornRule && pos%sectorSize != 0 {
		lead := make([]byte, sectorSize-pos%sectorSize)
		n, err := r.ReadAt(lead, pos)
		if err != nil && !errors.Is(err, io.EOF) {
			return res, fmt.Errorf("read at %d: %w", pos, err)
		}
		if n == len(lead) && allZero(lead) {
			return res, nil
		}
	}
	buf := make([]byte, resyncChunk+sectorSize)
	for at := pos + 1; ; at += resyncChunk {
		n, err := r.ReadAt(buf, at)
		if err != nil && !errors.Is(err, io.EOF) {
			return res, fmt.Errorf("read at %d: %w", at, err)
		}
		b := buf[:n]
		last := n // positions this read decides; a full read leaves its overlap to the next
		if n == len(buf) {
			last = resyncChunk
		}
		for i := range last {
			p := at + int64(i)
			if b[i] != 0 {
				res.dataEnd = p + 1
			}
			if tornRule && p%sectorSize == 0 && i+sectorSize <= n && allZero(b[i:i+sectorSize]) {
				return res, nil
			}
			if i+recordHeaderSize > n || b[i+16] == 0 {
				continue
			}
			off := binary.LittleEndian.Uint64(b[i+8 : i+16])
			if off < want || off >= limit || off-want > uint64(p-pos)/recordHeaderSize {
				continue
			}
			ln := int(binary.LittleEndian.Uint32(b[i : i+4]))
			if ln > maxLen {
				continue
			}
			rec := b[i:]
			if len(rec) < recordHeaderSize+ln {
				rec = make([]byte, recordHeaderSize+ln)
				if m, err := r.ReadAt(rec, p); err != nil && !errors.Is(err, io.EOF) {
					return res, fmt.Errorf("read at %d: %w", p, err)
				} else if m < len(rec) {
					continue
				}
			}
			if _, _, status, _ := decodeRecord(rec, off, maxLen); status == decodeOK {
				return resyncResult{found: true, pos: p, offset: off}, nil
			}
		}
		if n < len(buf) {
			return res, nil
		}
	}
}
