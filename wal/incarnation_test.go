package wal

import (
	"bytes"
	"log/slog"
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
	if got := l.Incarnation(); got != 0 || l.Recovery().NewIncarnation {
		t.Fatalf("a new log: incarnation %d (new %v), want 0", got, l.Recovery().NewIncarnation)
	}
	want := uint64(0)
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
		if err != nil || got != s {
			t.Fatalf("%+v decodes to %+v, %v", s, got, err)
		}
	}
	b := encodeIncarnation(incarnationState{n: 3, clean: true, cleanEnd: 9})
	for i := range b {
		damaged := bytes.Clone(b)
		damaged[i] ^= 0x10
		if _, err := decodeIncarnation(damaged); err == nil {
			t.Fatalf("a flipped bit in byte %d went unnoticed", i)
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
	if _, err := l.Append(testCtx(t), entries(0, 3, 50), AfterFsync); err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	full.Store(true)
	l = mustOpen(t, fs, dir, incarnationOpts)
	if got := l.Incarnation(); got != 0 || l.Recovery().NewIncarnation {
		t.Fatalf("after a clean close, on a full disk: incarnation %d (new %v), want 0", got, l.Recovery().NewIncarnation)
	}
	l.crashForTest()
	for _, want := range []uint64{1, 1} { // the crash starts one; the clean close before the second open keeps it
		l = mustOpen(t, fs, dir, incarnationOpts)
		if got := l.Incarnation(); got != want {
			t.Fatalf("on a full disk: incarnation %d, want %d", got, want)
		}
		mustClose(t, l)
	}
}
