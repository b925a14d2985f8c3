package wal

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

var incarnationOpts = Options{BackgroundSyncInterval: -1, SyncBytesThreshold: -1, TailCacheBytes: 64 << 10,
	Logger: slog.New(slog.DiscardHandler)}

// readAt returns the record at offset off, which must be there.
func readAt(t *testing.T, l *Log, off uint64) Record {
	t.Helper()
	recs, err := l.ReadWritten(off, 1<<20)
	if err != nil || len(recs) == 0 || recs[0].Offset != off {
		t.Fatalf("read offset %d: %v (%d records)", off, err, len(recs))
	}
	return recs[0]
}

// TestIncarnationAfterPowerCut: a power cut drops the records written but
// not synced, and the log ends cleanly below them. The appends after it
// reuse their offsets for other records, and the reopened log's
// incarnation tells them apart.
func TestIncarnationAfterPowerCut(t *testing.T) {
	const dir = "log"
	ctx := testCtx(t)
	fs := vfs.NewCrashableMem()
	l := mustOpen(t, fs, dir, incarnationOpts)
	if _, err := l.Append(ctx, entries(0, 5, 100), AfterFsync); err != nil {
		t.Fatal(err)
	}
	mustClose(t, l) // a clean close and reopen: the incarnation stays
	l = mustOpen(t, fs, dir, incarnationOpts)
	if l.Recovery().NewIncarnation {
		t.Fatalf("a reopen after a clean close started incarnation %d", l.Incarnation())
	}
	if _, err := l.Append(ctx, entries(5, 5, 100), AfterFsync); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, entries(10, 10, 100), AfterFlush); err != nil {
		t.Fatal(err)
	}
	before, lostRecord := l.Incarnation(), readAt(t, l, 15)
	keptAt, lostAt := l.IncarnationAt(3), l.IncarnationAt(15)
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l = mustOpen(t, crashed, dir, incarnationOpts)
	defer l.Close()
	if rep := l.Recovery(); rep.End != 10 || rep.Stop != nil || rep.LatchedCut {
		t.Fatalf("after the power cut: end %d, stop %v, latched cut %v; want a clean end at 10", rep.End, rep.Stop, rep.LatchedCut)
	}
	if _, err := l.Append(ctx, entries(100, 10, 40), AfterFlush); err != nil {
		t.Fatal(err)
	}
	reused := readAt(t, l, 15)
	if bytes.Equal(reused.Payload, lostRecord.Payload) {
		t.Fatalf("offset 15 holds the same record before and after the cut")
	}
	if after := l.Incarnation(); after == before {
		t.Fatalf("offset 15 names two records under one incarnation, %d", after)
	}
	if got := l.IncarnationAt(3); got != keptAt {
		t.Fatalf("offset 3 survived the cut but now names incarnation %d, not %d", got, keptAt)
	}
	if got := l.IncarnationAt(15); got == lostAt || got != l.Incarnation() {
		t.Fatalf("offset 15 rewritten after the cut names incarnation %d (before %d, log %d)", got, lostAt, l.Incarnation())
	}
	if rep := l.Recovery(); !rep.NewIncarnation || rep.Incarnation != l.Incarnation() {
		t.Fatalf("recovery report: incarnation %d new %v; log says %d", rep.Incarnation, rep.NewIncarnation, l.Incarnation())
	}
}

// TestIncarnationAcrossReopens: a clean Close keeps the incarnation; every
// other way a log stops, or a cut at the next Open, starts a new one, which
// persists from then on.
func TestIncarnationAcrossReopens(t *testing.T) {
	const dir = "log"
	ctx := testCtx(t)
	fs := vfs.NewMem()
	appendSome := func(l *Log, d Boundary) {
		t.Helper()
		if _, err := l.Append(ctx, entries(int(l.WrittenNext()), 5, 50), d); err != nil {
			t.Fatal(err)
		}
	}
	l := mustOpen(t, fs, dir, incarnationOpts)
	want := l.Incarnation()
	if want < 2 || l.Recovery().NewIncarnation {
		t.Fatalf("a new log: incarnation %d (new %v), want one of its own, at least 2", want, l.Recovery().NewIncarnation)
	}
	for _, step := range []struct {
		name string
		stop func(l *Log) // ends the open log
		bump bool         // the next Open starts a new incarnation
	}{
		{"clean close", func(l *Log) { appendSome(l, AfterFlush); mustClose(t, l) }, false},
		{"clean close of an idle log", mustCloseFunc(t), false},
		{"process crash", func(l *Log) { appendSome(l, AfterFsync); l.crashForTest() }, true},
		{"clean close after the crash", func(l *Log) { appendSome(l, AfterFlush); mustClose(t, l) }, false},
		{"cut back after a clean close", func(l *Log) {
			appendSome(l, AfterFsync)
			mustClose(t, l)
			if err := CutBack(fs, dir, l.DurableNext()-2); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"cut marker that cuts nothing", func(l *Log) {
			mustClose(t, l)
			if err := LoseUnsyncedOnNextOpen(fs, dir, l.DurableNext()); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"crash of an idle log", func(l *Log) { l.crashForTest() }, true},
	} {
		step.stop(l)
		if step.bump {
			want++
		}
		l = mustOpen(t, fs, dir, incarnationOpts)
		if got := l.Incarnation(); got != want || l.Recovery().NewIncarnation != step.bump {
			t.Fatalf("after %s: incarnation %d (new %v), want %d (new %v)", step.name, got, l.Recovery().NewIncarnation, want, step.bump)
		}
	}
	mustClose(t, l)
}

func mustClose(t *testing.T, l *Log) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

func mustCloseFunc(t *testing.T) func(*Log) { return func(l *Log) { mustClose(t, l) } }

// TestIncarnationOfAnOlderLog: a log written before incarnations were kept
// (segments, no INCARNATION) starts at 1, not at a new log's 0.
func TestIncarnationOfAnOlderLog(t *testing.T) {
	const dir = "log"
	fs := vfs.NewMem()
	l := mustOpen(t, fs, dir, incarnationOpts)
	if _, err := l.Append(testCtx(t), entries(0, 3, 50), AfterFsync); err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	if err := fs.Remove(fs.PathJoin(dir, incarnationName)); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, fs, dir, incarnationOpts)
	defer l.Close()
	if got := l.Incarnation(); got != 1 || !l.Recovery().NewIncarnation {
		t.Fatalf("incarnation %d (new %v), want 1 (new)", got, l.Recovery().NewIncarnation)
	}
}

// TestIncarnationFile: the file round-trips, and damage to it is refused,
// as damage to EPOCH is.
func TestIncarnationFile(t *testing.T) {
	for _, s := range []incarnationState{{}, {n: 7}, {n: 7, clean: true}, {n: 1 << 40, clean: true, cleanEnd: 12345}} {
		got, err := decodeIncarnation(encodeIncarnation(s))
		if err != nil || fmt.Sprint(got) != fmt.Sprint(s) {
			t.Fatalf("%+v decodes to %+v, %v", s, got, err)
		}
	}
	b := encodeIncarnation(incarnationState{n: 3, clean: true, cleanEnd: 9, starts: []incarnationStart{{1, 0}, {3, 5}}})
	for i := range b {
		damaged := bytes.Clone(b)
		damaged[i] ^= 0x10
		got, err := decodeIncarnation(damaged)
		switch {
		case i < incarnationHeaderSize && err == nil:
			t.Fatalf("a flipped bit in header byte %d went unnoticed", i)
		case i >= incarnationHeaderSize && (err != nil || got.starts != nil):
			t.Fatalf("a flipped bit in history byte %d: %+v, %v; want the header kept and the history dropped", i, got, err)
		}
	}
	if _, err := decodeIncarnation(b[:12]); err == nil {
		t.Fatal("a short file went unnoticed")
	}
}

// TestIncarnationOnAFullDisk: with no room for a new file, a log still
// opens and closes, and keeps or starts its incarnation as it would with
// room: INCARNATION is overwritten in place.
func TestIncarnationOnAFullDisk(t *testing.T) {
	const dir = "log"
	var full atomic.Bool
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && op.Kind == errorfs.OpCreate {
			return syscall.ENOSPC
		}
		return nil
	}))
	l := mustOpen(t, fs, dir, incarnationOpts)
	first := l.Incarnation()
	if _, err := l.Append(testCtx(t), entries(0, 3, 50), AfterFsync); err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	full.Store(true)
	l = mustOpen(t, fs, dir, incarnationOpts)
	if got := l.Incarnation(); got != first || l.Recovery().NewIncarnation {
		t.Fatalf("after a clean close, on a full disk: incarnation %d (new %v), want %d", got, l.Recovery().NewIncarnation, first)
	}
	l.crashForTest()
	for _, want := range []uint64{first + 1, first + 1} { // the crash starts one; the clean close before the second open keeps it
		l = mustOpen(t, fs, dir, incarnationOpts)
		if got := l.Incarnation(); got != want {
			t.Fatalf("on a full disk: incarnation %d, want %d", got, want)
		}
		mustClose(t, l)
	}
}

// A new log has no INCARNATION until its first Close; that Close on a full
// disk leaves none (the next Open starts a new incarnation), not an empty
// file that no Open can read.
func TestIncarnationFirstCloseOnAFullDisk(t *testing.T) {
	const dir = "log"
	var full atomic.Bool
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && (op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt) &&
			strings.Contains(op.Path, incarnationName) {
			return syscall.ENOSPC
		}
		return nil
	}))
	l := mustOpen(t, fs, dir, incarnationOpts)
	if _, err := l.Append(testCtx(t), entries(0, 3, 50), AfterFsync); err != nil {
		t.Fatal(err)
	}
	full.Store(true)
	if err := l.Close(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("close on a full disk: %v, want ENOSPC", err)
	}
	full.Store(false)
	l = mustOpen(t, fs, dir, incarnationOpts)
	defer mustClose(t, l)
	if n := l.DurableNext(); n != 3 {
		t.Fatalf("reopened durable to %d, want 3", n)
	}
}

// A log made again where one was removed (a queue deleted and declared
// again, a data directory wiped) starts an incarnation of its own, so its
// records are not named as the old log's were: the same offset, another
// incarnation. Its records carry that incarnation from the first Open on,
// across a clean Close.
func TestIncarnationOfALogMadeAgain(t *testing.T) {
	const dir = "log"
	ctx := testCtx(t)
	fs := vfs.NewMem()
	seen := map[uint64]bool{}
	for round := range 5 {
		l := mustOpen(t, fs, dir, incarnationOpts)
		n := l.Incarnation()
		if _, err := l.Append(ctx, entries(0, 3, 50), AfterFsync); err != nil {
			t.Fatal(err)
		}
		if seen[n] || n < 2 || l.IncarnationAt(0) != n {
			t.Fatalf("round %d: incarnation %d, the record at 0 names %d; earlier logs had %v", round, n, l.IncarnationAt(0), seen)
		}
		seen[n] = true
		mustClose(t, l)
		l = mustOpen(t, fs, dir, incarnationOpts)
		if l.Incarnation() != n || l.IncarnationAt(0) != n {
			t.Fatalf("round %d: after a clean close, incarnation %d and the record at 0 names %d, want %d",
				round, l.Incarnation(), l.IncarnationAt(0), n)
		}
		mustClose(t, l)
		if err := fs.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
}

// A new log that crashes before its first Close keeps its records' name:
// the first Open wrote its incarnation down.
func TestIncarnationOfANewLogThatCrashed(t *testing.T) {
	const dir = "log"
	fs := vfs.NewMem()
	l := mustOpen(t, fs, dir, incarnationOpts)
	n := l.Incarnation()
	if _, err := l.Append(testCtx(t), entries(0, 3, 50), AfterFsync); err != nil {
		t.Fatal(err)
	}
	l.crashForTest()
	l = mustOpen(t, fs, dir, incarnationOpts)
	defer mustClose(t, l)
	if l.IncarnationAt(0) != n || l.Incarnation() != n+1 {
		t.Fatalf("after a crash before the first close: the record at 0 names %d, the log is at %d; want %d and %d",
			l.IncarnationAt(0), l.Incarnation(), n, n+1)
	}
}

// TestIncarnationAtAcrossCuts: through crashes, cuts and clean reopens, a
// record keeps the incarnation it was written in, and records written at
// reused offsets get the incarnation of their own Open.
func TestIncarnationAtAcrossCuts(t *testing.T) {
	const dir = "log"
	ctx := testCtx(t)
	fs := vfs.NewCrashableMem()
	written := map[uint64]uint64{} // offset -> incarnation when appended
	appendN := func(l *Log, n int, d Boundary) {
		t.Helper()
		res, err := l.Append(ctx, entries(0, n, 30), d)
		if err != nil {
			t.Fatal(err)
		}
		for o := res.First; o < res.Next; o++ {
			written[o] = l.Incarnation()
		}
	}
	check := func(l *Log, what string) {
		t.Helper()
		for o := l.Head(); o < l.WrittenNext(); o++ {
			if got := l.IncarnationAt(o); got != written[o] {
				t.Fatalf("%s: offset %d names incarnation %d, was written in %d", what, o, got, written[o])
			}
		}
	}
	l := mustOpen(t, fs, dir, incarnationOpts)
	appendN(l, 10, AfterFsync)
	mustClose(t, l)
	for round := range 6 {
		l = mustOpen(t, fs, dir, incarnationOpts)
		for o := l.WrittenNext(); ; o++ { // what the cut took is gone
			if _, ok := written[o]; !ok {
				break
			}
			delete(written, o)
		}
		check(l, fmt.Sprintf("round %d, after the open", round))
		appendN(l, 5, AfterFsync)
		appendN(l, 5, AfterFlush) // lost by the power cut below
		check(l, fmt.Sprintf("round %d, before the cut", round))
		switch round % 3 {
		case 0: // a power cut: the unsynced records go
			crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			fs = crashed
		case 1: // a clean close: nothing goes, the incarnation stays
			mustClose(t, l)
		case 2: // a crash that lost nothing
			crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 2))})
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			fs = crashed
		}
	}
	l = mustOpen(t, fs, dir, incarnationOpts)
	defer l.Close()
	for o := l.WrittenNext(); ; o++ {
		if _, ok := written[o]; !ok {
			break
		}
		delete(written, o)
	}
	check(l, "at the end")
	if l.Incarnation() < 3 {
		t.Fatalf("incarnation %d after four cuts and crashes", l.Incarnation())
	}
}

// TestIncarnationHistoryFile: the history is kept bounded and pruned, an
// INCARNATION from before it was kept still reads, and a history that
// does not verify is dropped while the header stands.
func TestIncarnationHistoryFile(t *testing.T) {
	starts := nextStarts(nil, 1, 100, 0)
	starts = nextStarts(starts, 2, 200, 0)
	starts = nextStarts(starts, 3, 150, 0) // a cut below incarnation 2's first record
	if want := []incarnationStart{{1, 100}, {3, 150}}; fmt.Sprint(starts) != fmt.Sprint(want) {
		t.Fatalf("history after a cut: %v, want %v", starts, want)
	}
	starts = nextStarts(starts, 4, 300, 160) // the head passed 150: entry 1 names nothing
	if want := []incarnationStart{{3, 150}, {4, 300}}; fmt.Sprint(starts) != fmt.Sprint(want) {
		t.Fatalf("history after retention: %v, want %v", starts, want)
	}
	var long []incarnationStart
	for n := uint64(1); n <= maxIncarnationStarts+10; n++ {
		long = nextStarts(long, n, n*10, 0)
	}
	if len(long) != maxIncarnationStarts || long[len(long)-1].n != maxIncarnationStarts+10 {
		t.Fatalf("history of %d entries ending %v", len(long), long[len(long)-1])
	}

	s := incarnationState{n: 4, clean: true, cleanEnd: 320, starts: starts}
	b := encodeIncarnation(s)
	got, err := decodeIncarnation(b)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(s) {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, s)
	}
	legacy, err := decodeIncarnation(b[:incarnationHeaderSize])
	if err != nil || legacy.n != 4 || legacy.starts != nil {
		t.Fatalf("a header-only file: %+v, %v", legacy, err)
	}
	stale := encodeIncarnation(incarnationState{n: 5})[:incarnationHeaderSize]
	stale = append(stale, b[incarnationHeaderSize:]...) // a header rewritten in place
	if got, err := decodeIncarnation(stale); err != nil || got.n != 5 || got.starts != nil {
		t.Fatalf("a header rewritten over an older history: %+v, %v; want incarnation 5 and no history", got, err)
	}
}

// FuzzDecodeIncarnation: whatever INCARNATION holds, decoding never
// panics, and what it accepts encodes back to the same bytes.
func FuzzDecodeIncarnation(f *testing.F) {
	f.Add(encodeIncarnation(incarnationState{n: 3, clean: true, cleanEnd: 9, starts: []incarnationStart{{1, 0}, {3, 5}}}))
	f.Add(encodeIncarnation(incarnationState{n: 1})[:incarnationHeaderSize])
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeIncarnation(b)
		if err != nil || s.starts == nil {
			return
		}
		if again := encodeIncarnation(s); !bytes.Equal(again, b) {
			t.Fatalf("%x decodes to %+v, which encodes to %x", b, s, again)
		}
	})
}
