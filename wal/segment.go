package wal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Segment header layout (little endian), 32 bytes at the start of every file:
//
//	0        8        16       20       24       28       32
//	+--------+--------+--------+--------+--------+--------+
//	| magic  | base   | version| zero   | zero   | crc    |
//	+--------+--------+--------+--------+--------+--------+
const (
	segmentHeaderSize = 32
	segmentVersion    = 1
	segmentSuffix     = ".seg"
)

var segmentMagic = [8]byte{'F', 'I', 'B', 'R', 'L', 'O', 'G', '1'}

func segmentName(base uint64) string { return fmt.Sprintf("%020d%s", base, segmentSuffix) }

// parseSegmentName returns the base offset a segment file name carries.
func parseSegmentName(name string) (uint64, bool) {
	digits, ok := strings.CutSuffix(name, segmentSuffix)
	if !ok || len(digits) != 20 {
		return 0, false
	}
	base, err := strconv.ParseUint(digits, 10, 64)
	return base, err == nil
}

func encodeSegmentHeader(base uint64) []byte {
	h := make([]byte, segmentHeaderSize)
	copy(h[0:8], segmentMagic[:])
	binary.LittleEndian.PutUint64(h[8:16], base)
	binary.LittleEndian.PutUint32(h[16:20], segmentVersion)
	binary.LittleEndian.PutUint32(h[28:32], crc32.Checksum(h[0:28], castagnoli))
	return h
}

// checkSegmentHeader verifies a header read from the segment named for base.
func checkSegmentHeader(h []byte, base uint64) error {
	bad := func(reason string) error {
		return &CorruptionError{Segment: base, Pos: 0, Offset: base, Reason: reason}
	}
	switch {
	case len(h) < segmentHeaderSize:
		return bad("short segment header")
	case string(h[0:8]) != string(segmentMagic[:]):
		return bad("bad segment magic")
	case binary.LittleEndian.Uint32(h[28:32]) != crc32.Checksum(h[0:28], castagnoli):
		return bad("segment header checksum mismatch")
	case binary.LittleEndian.Uint32(h[16:20]) != segmentVersion:
		return bad(fmt.Sprintf("unknown segment version %d", binary.LittleEndian.Uint32(h[16:20])))
	case binary.LittleEndian.Uint64(h[8:16]) != base:
		return bad(fmt.Sprintf("header names base %d", binary.LittleEndian.Uint64(h[8:16])))
	}
	return nil
}

// indexEntry maps a record's offset to its byte position in the segment.
type indexEntry struct {
	offset uint64
	pos    int64
}

// segment is one file of the log. Its file handle serves concurrent preads;
// refs keeps it open while readers use it after retention removed it.
type segment struct {
	base uint64
	path string
	file vfs.File

	refs    atomic.Int32 // one for the log's list, one per reader
	removed atomic.Bool

	mu sync.Mutex // guards the fields below
	// index holds a sparse entry at least every IndexSpacing bytes, always
	// including the first record. Complete for the active segment and for
	// segments sealed by this process; built on first read otherwise.
	index   []indexEntry
	indexed bool
	// end is the offset after the segment's last record, known once the
	// segment is sealed (zero while active).
	end uint64
	// validEnd and corrupt describe a sealed segment whose scan stopped early.
	corrupt *CorruptionError
}

func newSegment(base uint64, path string, f vfs.File) *segment {
	s := &segment{base: base, path: path, file: f}
	s.refs.Store(1)
	return s
}

func (s *segment) acquire() { s.refs.Add(1) }

// release drops a reference and closes the file after the last one.
func (s *segment) release() {
	if s.refs.Add(-1) == 0 {
		_ = s.file.Close()
	}
}

// addIndexLocked appends index entries; the caller holds s.mu.
func (s *segment) addIndexLocked(entries []indexEntry) {
	s.index = append(s.index, entries...)
}

// lookupLocked returns the index entry at or before offset.
func (s *segment) lookupLocked(offset uint64) indexEntry {
	i := sort.Search(len(s.index), func(i int) bool { return s.index[i].offset > offset })
	if i == 0 {
		return indexEntry{offset: s.base, pos: segmentHeaderSize}
	}
	return s.index[i-1]
}
