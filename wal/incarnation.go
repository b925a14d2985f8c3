package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"syscall"

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
// Open writes it, with the clean end cleared, before anything can append;
// a clean Close writes it again with the end. A new log has none until its
// first Close (its incarnation is 0); an existing log without one (written
// by a version that kept none) starts at incarnation 1.

const incarnationName = "INCARNATION"

// incarnationState is the content of INCARNATION.
type incarnationState struct {
	n        uint64
	clean    bool   // the last run ended with a clean Close...
	cleanEnd uint64 // ...at this end
}

func encodeIncarnation(s incarnationState) []byte {
	b := make([]byte, 20)
	binary.LittleEndian.PutUint64(b, s.n)
	if s.clean {
		binary.LittleEndian.PutUint64(b[8:], s.cleanEnd+1)
	}
	binary.LittleEndian.PutUint32(b[16:], crc32.Checksum(b[:16], castagnoli))
	return b
}

func decodeIncarnation(b []byte) (incarnationState, error) {
	if len(b) != 20 {
		return incarnationState{}, fmt.Errorf("wal: %s of %d bytes, want 20", incarnationName, len(b))
	}
	if binary.LittleEndian.Uint32(b[16:]) != crc32.Checksum(b[:16], castagnoli) {
		return incarnationState{}, fmt.Errorf("wal: %s checksum mismatch", incarnationName)
	}
	s := incarnationState{n: binary.LittleEndian.Uint64(b)}
	if end := binary.LittleEndian.Uint64(b[8:]); end > 0 {
		s.clean, s.cleanEnd = true, end-1
	}
	return s, nil
}

// readIncarnation returns the content of INCARNATION, and false when there
// is none.
func (l *Log) readIncarnation() (incarnationState, bool, error) {
	b, ok, err := ReadSmallFile(l.fs, l.dir, incarnationName, 64)
	if !ok || err != nil {
		return incarnationState{}, false, err
	}
	s, err := decodeIncarnation(b)
	return s, err == nil, err
}

// writeIncarnation replaces INCARNATION atomically. On a full disk, where
// the replacement cannot be created, it overwrites the file in place
// instead: that allocates nothing (the file keeps its 20 bytes), and one
// write that small, inside one sector, lands whole or not at all. So a log
// on a full disk still opens and closes.
func (l *Log) writeIncarnation(s incarnationState) error {
	b := encodeIncarnation(s)
	err := writeSynced(l.fs, l.dirFile, l.dir, incarnationName, b)
	if !errors.Is(err, syscall.ENOSPC) {
		return err
	}
	_ = l.fs.Remove(l.fs.PathJoin(l.dir, incarnationName+tmpSuffix))
	f, oerr := l.fs.OpenReadWrite(l.fs.PathJoin(l.dir, incarnationName), vfs.WriteCategoryUnspecified)
	if oerr != nil {
		return err // none to overwrite (a new log's first Close): the next Open starts a new incarnation
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
		return 0, false // a new log: nothing was ever handed out
	case !ok:
		return 1, true // a log from before incarnations were kept
	case prev.clean && prev.cleanEnd == rep.End && rep.Stop == nil:
		return prev.n, false // where the clean Close left it: a cut would have lowered the end
	}
	return prev.n + 1, true
}

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
	if !ok && !existed {
		return nil // nothing to clear: a crash before the first Close finds segments and no file
	}
	if isNew {
		l.opts.Logger.Info("wal: the log starts a new incarnation: offsets past its end may be reused",
			"dir", l.dir, "incarnation", n, "end", l.recovery.End)
	}
	return l.writeIncarnation(incarnationState{n: n})
}

// closeIncarnation records a clean Close at end: the next Open that finds
// the log there keeps the incarnation.
func (l *Log) closeIncarnation(end uint64) error {
	return l.writeIncarnation(incarnationState{n: l.incarnation, clean: true, cleanEnd: end})
}

// Incarnation is the log's incarnation: it changes whenever an Open may
// have cut records the log had held (see incarnation.go), so an offset
// and the incarnation together name one record for as long as the log's
// directory exists.
func (l *Log) Incarnation() uint64 { return l.incarnation }
