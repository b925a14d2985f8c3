package wal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Record layout (little endian):
//
//	0       4       8              16   17
//	+-------+-------+--------------+----+----------------+
//	| len   | crc   | offset       |type| payload (len)  |
//	+-------+-------+--------------+----+----------------+
//
// crc is CRC32C over len, then offset, type and payload.
const (
	recordHeaderSize = 17
	// maxPayload caps a single record so that a corrupt length can never ask
	// for an absurd read. Options.MaxRecordSize may lower it.
	maxPayload = 64 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Entry is one record to append: a non-zero type and its payload. The log
// keeps the payload once the append is handed in (its tail cache serves
// readers from it): it must not change from then on.
type Entry struct {
	Type    byte
	Payload []byte
}

// Record is one record read back from the log.
type Record struct {
	Offset  uint64
	Type    byte
	Payload []byte
}

// encodedSize is the number of bytes an entry takes on disk.
func encodedSize(payload int) int { return recordHeaderSize + payload }

// appendRecord encodes one record at the end of buf.
func appendRecord(buf []byte, offset uint64, typ byte, payload []byte) []byte {
	start := len(buf)
	buf = append(buf, make([]byte, recordHeaderSize)...)
	buf = append(buf, payload...)
	h := buf[start:]
	binary.LittleEndian.PutUint32(h[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint64(h[8:16], offset)
	h[16] = typ
	crc := crc32.Update(0, castagnoli, h[0:4])
	crc = crc32.Update(crc, castagnoli, h[8:])
	binary.LittleEndian.PutUint32(h[4:8], crc)
	return buf
}

// decodeStatus says why decodeRecord stopped.
type decodeStatus int

const (
	decodeOK    decodeStatus = iota
	decodeEnd                // a zero header: preallocated or never written space
	decodeShort              // fewer bytes than the record needs
	decodeBad                // a header or checksum that does not verify
)

// decodeRecord decodes the record at the start of b, expecting offset want.
// It returns the record (its payload aliases b), the bytes it took, and a
// status; on decodeBad, reason says what failed.
func decodeRecord(b []byte, want uint64, maxLen int) (Record, int, decodeStatus, string) {
	if len(b) < recordHeaderSize {
		if allZero(b) {
			return Record{}, 0, decodeEnd, ""
		}
		return Record{}, 0, decodeShort, "truncated record header"
	}
	n := binary.LittleEndian.Uint32(b[0:4])
	crc := binary.LittleEndian.Uint32(b[4:8])
	off := binary.LittleEndian.Uint64(b[8:16])
	typ := b[16]
	if typ == 0 {
		if n == 0 && crc == 0 && off == 0 {
			return Record{}, 0, decodeEnd, ""
		}
		return Record{}, 0, decodeBad, "record type 0"
	}
	if int64(n) > int64(maxLen) {
		return Record{}, 0, decodeBad, fmt.Sprintf("record length %d exceeds limit %d", n, maxLen)
	}
	total := recordHeaderSize + int(n)
	if len(b) < total {
		return Record{}, 0, decodeShort, "truncated record payload"
	}
	got := crc32.Update(0, castagnoli, b[0:4])
	got = crc32.Update(got, castagnoli, b[8:total])
	if got != crc {
		return Record{}, 0, decodeBad, "checksum mismatch"
	}
	if off != want {
		return Record{}, 0, decodeBad, fmt.Sprintf("record carries offset %d", off)
	}
	return Record{Offset: off, Type: typ, Payload: b[recordHeaderSize:total]}, total, decodeOK, ""
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
