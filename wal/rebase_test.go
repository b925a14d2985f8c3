package wal

import (
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// An empty log rebased to 1000 takes its next record at 1000, keeps its
// epoch, refuses reads below the new head, and reopens (after a power
// loss that drops everything unsynced) where it was moved.
func TestRebaseEmptyLog(t *testing.T) {
	ctx := testCtx(t)
	fs := vfs.NewCrashableMem()
	opts := Options{SegmentSize: 16 << 10, BackgroundSyncInterval: -1, Logger: slog.New(slog.DiscardHandler)}
	l := mustOpen(t, fs, "log", opts)
	if err := l.Seal(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if err := l.Rebase(ctx, 1000); err != nil {
		t.Fatalf("rebase: %v", err)
	}
	if h, w, d := l.Head(), l.WrittenNext(), l.DurableNext(); h != 1000 || w != 1000 || d != 1000 {
		t.Fatalf("after rebase head %d written %d durable %d, want 1000", h, w, d)
	}
	if err := l.Rebase(ctx, 1000); err != nil {
		t.Fatalf("rebase to where the log is: %v", err)
	}
	if err := l.Rebase(ctx, 999); err == nil || errors.Is(err, ErrNotEmpty) {
		t.Fatalf("rebase backwards: %v", err)
	}
	if _, err := l.ReadWritten(0, 1<<10); !errors.Is(err, ErrBeforeHead) {
		t.Fatalf("read below the new head: %v", err)
	}
	// Enough records to roll over: the new segments follow the rebased one.
	const n = 300
	for i := 0; i < n; i += 10 {
		res, err := l.Append(ctx, entries(i, 10, 100), AfterFlush)
		if err != nil || res.First != 1000+uint64(i) {
			t.Fatalf("append %d: %+v %v", i, res, err)
		}
	}
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if st := l.Status(); st.Segments < 2 || st.Head != 1000 {
		t.Fatalf("status after appends: %d segments, head %d", st.Segments, st.Head)
	}
	if err := l.Rebase(ctx, 5000); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("rebase of a log with records: %v", err)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	l.crashForTest()

	l = mustOpen(t, crashed, "log", opts)
	defer l.Close()
	if h, w, e := l.Head(), l.WrittenNext(), l.Epoch(); h != 1000 || w != 1000+n || e != 3 {
		t.Fatalf("after a crash: head %d written %d epoch %d, want 1000, %d, 3", h, w, e, 1000+n)
	}
	recs := readAll(t, l, true)
	if len(recs) != n {
		t.Fatalf("read %d records, want %d", len(recs), n)
	}
	for i, r := range recs {
		if r.Offset != 1000+uint64(i) || string(r.Payload) != string(payload(i, 100)) {
			t.Fatalf("record %d: offset %d payload %q", i, r.Offset, r.Payload)
		}
	}
}

// A log whose retention has removed every record is empty again and can
// be rebased; the removed segments stay gone.
func TestRebaseAfterRetention(t *testing.T) {
	ctx := testCtx(t)
	l := mustOpen(t, vfs.NewMem(), "log", Options{SegmentSize: 4 << 10, Logger: slog.New(slog.DiscardHandler)})
	defer l.Close()
	for i := 0; i < 60; i += 6 {
		if _, err := l.Append(ctx, entries(i, 6, 200), AfterFsync); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Rebase(ctx, 100); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("rebase with records: %v", err)
	}
	if err := l.AdvanceHead(60); err != nil {
		t.Fatal(err)
	}
	if err := l.Rebase(ctx, 100); err != nil {
		t.Fatalf("rebase after retention removed everything: %v", err)
	}
	res, err := l.Append(ctx, entries(0, 1, 10), AfterFsync)
	if err != nil || res.First != 100 {
		t.Fatalf("append after rebase: %+v %v", res, err)
	}
	if st := l.Status(); st.Segments != 1 || st.Head != 100 {
		t.Fatalf("after rebase: %d segments, head %d", st.Segments, st.Head)
	}
}

// A rebase that cannot create the new segment latches the log, and the
// reopen finds an empty log at its old base, ready to be rebased again.
func TestRebaseFailsToCreate(t *testing.T) {
	ctx := testCtx(t)
	var fail atomic.Bool
	mem := vfs.NewMem()
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if fail.Load() && op.Kind == errorfs.OpCreate && strings.HasSuffix(op.Path, segmentSuffix) {
			return syscall.EIO
		}
		return nil
	}))
	opts := Options{Logger: slog.New(slog.DiscardHandler)}
	l := mustOpen(t, fs, "log", opts)
	fail.Store(true)
	if err := l.Rebase(ctx, 70); !errors.Is(err, ErrLatched) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("rebase with a failing create: %v", err)
	}
	if _, err := l.Append(ctx, entries(0, 1, 10), AfterFlush); !errors.Is(err, ErrLatched) {
		t.Fatalf("append after a failed rebase: %v", err)
	}
	l.Close()
	fail.Store(false)
	l = mustOpen(t, fs, "log", opts)
	defer l.Close()
	if h, w := l.Head(), l.WrittenNext(); h != 0 || w != 0 {
		t.Fatalf("reopen after a failed rebase: head %d written %d", h, w)
	}
	if err := l.Rebase(ctx, 70); err != nil {
		t.Fatalf("rebase again: %v", err)
	}
	if _, err := l.Append(ctx, entries(0, 1, 10), AfterFsync); err != nil {
		t.Fatal(err)
	}
}

// CachedFrom follows the tail cache's window: off, empty, and after the
// budget evicted the oldest blocks.
func TestCachedFrom(t *testing.T) {
	ctx := testCtx(t)
	off := mustOpen(t, vfs.NewMem(), "off", Options{TailCacheBytes: -1})
	defer off.Close()
	if _, ok := off.CachedFrom(); ok {
		t.Fatal("CachedFrom reports a cache that is off")
	}
	l := mustOpen(t, vfs.NewMem(), "log", Options{TailCacheBytes: 8 << 10})
	defer l.Close()
	if from, ok := l.CachedFrom(); !ok || from != 0 {
		t.Fatalf("empty cache: %d %v", from, ok)
	}
	if _, err := l.Append(ctx, entries(0, 10, 100), AfterFlush); err != nil {
		t.Fatal(err)
	}
	if from, _ := l.CachedFrom(); from != 0 {
		t.Fatalf("cache holding everything starts at %d", from)
	}
	for i := 10; i < 1000; i += 10 {
		if _, err := l.Append(ctx, entries(i, 10, 100), AfterFlush); err != nil {
			t.Fatal(err)
		}
	}
	from, _ := l.CachedFrom()
	if from == 0 || from >= 1000 || from%tailBlockLen != 0 {
		t.Fatalf("cache over its budget starts at %d", from)
	}
	before := l.Status().TailCacheMisses
	recs, err := l.ReadWritten(from, 1<<20)
	if err != nil || len(recs) != int(1000-from) {
		t.Fatalf("read from %d: %d records, %v", from, len(recs), err)
	}
	if st := l.Status(); st.TailCacheMisses != before {
		t.Fatalf("reading from CachedFrom missed the cache %d times", st.TailCacheMisses-before)
	}
	if _, err := l.ReadWritten(from-1, 10); err != nil {
		t.Fatal(err)
	}
	if st := l.Status(); st.TailCacheMisses == before {
		t.Fatal("the record below CachedFrom came from the cache")
	}
}
