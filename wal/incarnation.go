package wal

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"sort"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Incarnation. An offset names one record only within an incarnation of
// the log. Recovery can end the log below offsets it had handed out: a
// power cut drops what was written but not synced (often leaving a clean
// end, with nothing to show for it), a torn tail is cut, a latched log is
// cut back to its last sync, a replica is cut back to the history a
// recovery installed. New appends then reuse those offsets for other
// records. So every Open that cannot show that nothing was cut starts a
// new incarnation: one more than the last. Only an Open that finds the
// log exactly where a clean Close left it, with nothing cut, keeps the
// incarnation. A crash that lost nothing (the page cache kept it all)
// starts a new one too: the log cannot tell it from a power cut.
//
// INCARNATION holds the incarnation and, after a clean Close, the end it
// closed at:
//
//	u64 incarnation | u64 clean end + 1 (0: not closed cleanly) | u32 crc32c of the 16 bytes
//
// followed by the history of incarnations, so that a record keeps naming
// the incarnation it was written in (IncarnationAt) across later Opens:
//
//	u32 count | count × (u64 incarnation | u64 first offset) | u32 crc32c of everything before
//
// An Open that starts incarnation n at end E drops the history entries at
// or past E (their records are gone) and adds (n, E); entries wholly below
// the log's head are dropped too. A file of only the first 20 bytes
// (written by a version that kept no history) has none: every record
// before the first entry is named incarnation 0.
//
// Open writes it, with the clean end cleared, before anything can append;
// a clean Close writes it again with the end. A new log has none until its
// first Close (its incarnation is 0); an existing log without one (written
// by a version that kept none) starts at incarnation 1.

const incarnationName = "INCARNATION"

// maxIncarnationStarts bounds the history kept: past it the oldest entry
// goes, and records before the next one are named incarnation 0.
const maxIncarnationStarts = 1024

// incarnationHeaderSize is the fixed part of INCARNATION.
const incarnationHeaderSize = 20

// incarnationStart says that records from first on were written in
// incarnation n (until a later entry's first).
type incarnationStart struct {
	n, first uint64
}

// incarnationState is the content of INCARNATION.
type incarnationState struct {
	n        uint64
	clean    bool               // the last run ended with a clean Close...
	cleanEnd uint64             // ...at this end
	starts   []incarnationStart // ascending in first (and n)
}

func encodeIncarnation(s incarnationState) []byte {
	b := make([]byte, incarnationHeaderSize, incarnationHeaderSize+8+16*len(s.starts))
	binary.LittleEndian.PutUint64(b, s.n)
	if s.clean {
		binary.LittleEndian.PutUint64(b[8:], s.cleanEnd+1)
	}
	binary.LittleEndian.PutUint32(b[16:], crc32.Checksum(b[:16], castagnoli))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s.starts)))
	for _, st := range s.starts {
		b = binary.LittleEndian.AppendUint64(b, st.n)
		b = binary.LittleEndian.AppendUint64(b, st.first)
	}
	return binary.LittleEndian.AppendUint32(b, historyChecksum(b[:16], b[incarnationHeaderSize:]))
}

// historyChecksum is the checksum of a history: over the header's first
// 16 bytes and the history, not the header's own checksum (a CRC over
// data followed by its CRC is a constant, which would leave the history's
// checksum blind to the header it belongs to).
func historyChecksum(head, history []byte) uint32 {
	return crc32.Update(crc32.Checksum(head, castagnoli), castagnoli, history)
}

// decodeIncarnation reads INCARNATION. A history that does not verify (a
// header rewritten in place on a full disk leaves the old one behind) is
// dropped: the header alone is authority for the incarnation.
func decodeIncarnation(b []byte) (incarnationState, error) {
	if len(b) < incarnationHeaderSize {
		return incarnationState{}, fmt.Errorf("wal: %s of %d bytes, want at least %d", incarnationName, len(b), incarnationHeaderSize)
	}
	if binary.LittleEndian.Uint32(b[16:]) != crc32.Checksum(b[:16], castagnoli) {
		return incarnationState{}, fmt.Errorf("wal: %s checksum mismatch", incarnationName)
	}
	s := incarnationState{n: binary.LittleEndian.Uint64(b)}
	if end := binary.LittleEndian.Uint64(b[8:]); end > 0 {
		s.clean, s.cleanEnd = true, end-1
	}
	s.starts = decodeStarts(b)
	return s, nil
}

// decodeStarts reads the history after the header; nil when there is none
// or it does not verify.
func decodeStarts(b []byte) []incarnationStart {
	rest := b[incarnationHeaderSize:]
	if len(rest) < 8 {
		return nil
	}
	k := int(binary.LittleEndian.Uint32(rest))
	if k > maxIncarnationStarts || len(rest) != 8+16*k ||
		binary.LittleEndian.Uint32(b[len(b)-4:]) != historyChecksum(b[:16], rest[:len(rest)-4]) {
		return nil
	}
	starts := make([]incarnationStart, k)
	for i := range starts {
		e := rest[4+16*i:]
		starts[i] = incarnationStart{n: binary.LittleEndian.Uint64(e), first: binary.LittleEndian.Uint64(e[8:])}
		if i > 0 && (starts[i].first <= starts[i-1].first || starts[i].n <= starts[i-1].n) {
			return nil
		}
	}
	return starts
}

// nextStarts is the history after an Open that starts incarnation n at end
// with the log's head at head: entries at or past end hold no record any
// more, entries wholly below head name none either.
func nextStarts(prev []incarnationStart, n, end, head uint64) []incarnationStart {
	var out []incarnationStart
	for i, st := range prev {
		if st.first >= end {
			break
		}
		if i+1 < len(prev) && prev[i+1].first <= head && prev[i+1].first < end {
			continue // the next entry covers everything from the head on
		}
		out = append(out, st)
	}
	out = append(out, incarnationStart{n: n, first: end})
	if len(out) > maxIncarnationStarts {
		out = out[len(out)-maxIncarnationStarts:]
	}
	return out
}

// readIncarnation returns the content of INCARNATION, and false when there
// is none.
func (l *Log) readIncarnation() (incarnationState, bool, error) {
	b, ok, err := ReadSmallFile(l.fs, l.dir, incarnationName, incarnationHeaderSize+8+16*maxIncarnationStarts)
	if !ok || err != nil {
		return incarnationState{}, false, err
	}
	s, err := decodeIncarnation(b)
	return s, err == nil, err
}

// writeIncarnation replaces INCARNATION atomically. On a full disk, where
// the replacement cannot be created, it overwrites the file's header in
// place instead: that allocates nothing, and one write that small, inside
// one sector, lands whole or not at all. So a log on a full disk still
// opens and closes; the history after the header then no longer verifies
// and is dropped (records written before are named incarnation 0: a
// consumer that deduplicates by the name may see them again, never miss
// one).
func (l *Log) writeIncarnation(s incarnationState) error {
	b := encodeIncarnation(s)
	err := writeSynced(l.fs, l.dirFile, l.dir, incarnationName, b)
	b = b[:incarnationHeaderSize]
	if !noSpace(err) {
		return err
	}
	_ = l.fs.Remove(l.fs.PathJoin(l.dir, incarnationName+tmpSuffix))
	path := l.fs.PathJoin(l.dir, incarnationName)
	// OpenReadWrite creates a missing file, and an empty INCARNATION left
	// by a failed write would stop every later Open: look first.
	if _, serr := l.fs.Stat(path); serr != nil {
		return err // none to overwrite (a new log's first Close): the next Open starts a new incarnation
	}
	f, oerr := l.fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if oerr != nil {
		return err
	}
	_, werr := f.WriteAt(b, 0)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("wal: overwrite %s on a full disk: %w", incarnationName, werr)
	}
	return nil
}

// nextIncarnation is the incarnation an Open starts, and whether it is a
// new one. prev is INCARNATION's content (ok false: none); existed says
// the directory held segments before this Open; rep is what recovery did.
func nextIncarnation(prev incarnationState, ok, existed bool, rep *RecoveryReport) (uint64, bool) {
	switch {
	case !ok && !existed:
		// A new log: nothing was ever handed out under its name, but a
		// log of the same name may have been (a queue deleted and
		// declared again, a data directory wiped): a number of its own,
		// at random, keeps (Partition, Offset, Incarnation) from naming
		// that log's messages to whoever remembers them (an upstream's
		// dedupe of an uplink's ids).
		return firstIncarnation(), false
	case !ok:
		return 1, true // a log from before incarnations were kept
	case prev.clean && prev.cleanEnd == rep.End && rep.Stop == nil:
		return prev.n, false // where the clean Close left it: a cut would have lowered the end
	}
	return prev.n + 1, true
}

// firstIncarnation is a new log's incarnation: at random, above the
// numbers a log without a history is given (0 for records from before it,
// 1 for the Open that found it so).
func firstIncarnation() uint64 { return 2 + rand.Uint64N(1<<31) }

// openIncarnation is recovery step 9: it settles the incarnation this Open
// starts and records it, not closed cleanly, before the writer starts.
func (l *Log) openIncarnation(existed bool) error {
	prev, ok, err := l.readIncarnation()
	if err != nil {
		return err
	}
	n, isNew := nextIncarnation(prev, ok, existed, &l.recovery)
	l.incarnation = n
	l.recovery.Incarnation, l.recovery.NewIncarnation = n, isNew
	l.starts = prev.starts
	if isNew {
		l.starts = nextStarts(prev.starts, n, l.recovery.End, l.head)
	}
	if !ok && !existed {
		// Its records are named n from the log's start, and the file says
		// so from now on: a crash before the first Close must not lose
		// the name (the records would come back under another, and an
		// upstream would take them for new).
		l.starts = []incarnationStart{{n: n, first: l.recovery.End}}
	}
	if isNew {
		l.opts.Logger.Info("wal: the log starts a new incarnation: offsets past its end may be reused",
			"dir", l.dir, "incarnation", n, "end", l.recovery.End)
	}
	return l.writeIncarnation(incarnationState{n: n, starts: l.starts})
}

// closeIncarnation records a clean Close at end: the next Open that finds
// the log there keeps the incarnation.
func (l *Log) closeIncarnation(end uint64) error {
	return l.writeIncarnation(incarnationState{n: l.incarnation, clean: true, cleanEnd: end, starts: l.starts})
}

// IncarnationAt is the incarnation the record at offset was written in:
// unlike Incarnation, it stays the same across Opens for as long as the
// record exists, and a record written later at the same offset (after a
// cut) has another. So a partition's offset and IncarnationAt name one
// record. Records from before the first incarnation kept are 0.
func (l *Log) IncarnationAt(offset uint64) uint64 {
	i := sort.Search(len(l.starts), func(i int) bool { return l.starts[i].first > offset })
	if i == 0 {
		return 0
	}
	return l.starts[i-1].n
}

// Incarnation is the log's incarnation: it changes whenever an Open may
// have cut records the log had held (see incarnation.go), so an offset
// and the incarnation together name one record for as long as the log's
// directory exists.
func (l *Log) Incarnation() uint64 { return l.incarnation }
