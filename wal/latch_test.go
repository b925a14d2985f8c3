package wal

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// errInjected is the storage failure the latch tests inject.
var errInjected = errors.New("injected storage failure")

// segmentFault fails the given operations on segment files while it is
// switched on; it starts off.
func segmentFault(kinds ...errorfs.OpKind) *errorfs.Toggle {
	return &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if strings.HasSuffix(op.Path, segmentSuffix) && slices.Contains(kinds, op.Kind) {
			return errInjected
		}
		return nil
	})}
}

// wantIntact checks that recs are the records from, from+1, ... carrying
// payload(offset, size).
func wantIntact(t *testing.T, recs []Record, from uint64, n, size int) {
	t.Helper()
	if len(recs) != n {
		t.Fatalf("read %d records, want %d", len(recs), n)
	}
	for i, r := range recs {
		o := from + uint64(i)
		if r.Offset != o || !bytes.Equal(r.Payload, payload(int(o), size)) {
			t.Fatalf("record %d: offset %d payload %q", o, r.Offset, r.Payload)
		}
	}
}

// wantLatchErr checks that err is the latch error: ErrLatched wrapping the
// StorageError of the injected failure.
func wantLatchErr(t *testing.T, what string, err error) {
	t.Helper()
	var se *StorageError
	if !errors.Is(err, ErrLatched) || !errors.As(err, &se) || !errors.Is(err, errInjected) {
		t.Fatalf("%s: got %v, want ErrLatched with a StorageError of the injected failure", what, err)
	}
}

// TestLatch injects a write or a sync failure into a log with durable (and
// possibly only written) records, checks that the log latches, and reopens
// it with the failure gone to check that the cut takes it back to its
// durable frontier at latch time and that appends go on from there.
func TestLatch(t *testing.T) {
	writeFault := []errorfs.OpKind{errorfs.OpFileWrite, errorfs.OpFileWriteAt}
	syncFault := []errorfs.OpKind{errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo}
	const (
		durableRecs = 100 // AfterFsync records before the failure
		recSize     = 100
		concurrent  = 8 // AppendAsync calls racing the failing append
	)
	for _, tc := range []struct {
		name        string
		fault       []errorfs.OpKind
		segmentSize int64
		// flushed AfterFlush records follow the durable ones before the
		// failure: the page cache holds them, the cut must remove them.
		flushed int
		// failSize is the payload size of the appends that meet the failure;
		// in the rollover cases none of them fits the active segment.
		failSize int
		// cutAtWritten: the rollover synced everything written before its
		// new segment's header write failed, so the cut keeps it all.
		cutAtWritten  bool
		rewroteHeader bool // the failed rollover left a segment without header
	}{
		{name: "write", fault: writeFault, failSize: recSize},
		{name: "sync", fault: syncFault, failSize: recSize},
		{name: "write-after-flushed", fault: writeFault, flushed: 30, failSize: recSize},
		{name: "sync-after-flushed", fault: syncFault, flushed: 30, failSize: recSize},
		{name: "write-at-rollover", fault: writeFault, segmentSize: 4 << 10, flushed: 10, failSize: 3900,
			cutAtWritten: true, rewroteHeader: true},
		{name: "sync-at-rollover", fault: syncFault, segmentSize: 4 << 10, flushed: 10, failSize: 3900},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			fault := segmentFault(tc.fault...)
			fs := errorfs.Wrap(vfs.NewMem(), fault)
			const dir = "log"
			opts := Options{SegmentSize: tc.segmentSize, BackgroundSyncInterval: -1, SyncBytesThreshold: -1,
				TailCacheBytes: 64 << 10, Logger: slog.New(slog.DiscardHandler)}
			l := mustOpen(t, fs, dir, opts)
			for i := 0; i < durableRecs; i += 10 {
				if _, err := l.Append(ctx, entries(i, 10, recSize), AfterFsync); err != nil {
					t.Fatalf("durable append %d: %v", i, err)
				}
			}
			for i := durableRecs; i < durableRecs+tc.flushed; i += 10 {
				if _, err := l.Append(ctx, entries(i, 10, recSize), AfterFlush); err != nil {
					t.Fatalf("flushed append %d: %v", i, err)
				}
			}
			durableBefore, writtenBefore := l.DurableNext(), l.WrittenNext()
			if writtenBefore != durableRecs+uint64(tc.flushed) {
				t.Fatalf("written %d before the failure, want %d", writtenBefore, durableRecs+tc.flushed)
			}
			if tc.flushed > 0 && writtenBefore == durableBefore {
				t.Fatalf("nothing written past durable %d: the case cuts nothing", durableBefore)
			}
			if tc.segmentSize > 0 && l.Status().Segments < 3 {
				t.Fatalf("only %d segments before the failure", l.Status().Segments)
			}
			cut := durableBefore
			if tc.cutAtWritten {
				cut = writtenBefore
			}

			// Frontier waiters that no append will satisfy.
			waitErrs := make(chan error, 2)
			go func() { _, err := l.WaitWritten(ctx, writtenBefore+1000); waitErrs <- err }()
			go func() { _, err := l.WaitDurable(ctx, writtenBefore+1000); waitErrs <- err }()

			fault.On()
			var wg sync.WaitGroup
			asyncErrs := make([]error, concurrent)
			for g := range concurrent {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, asyncErrs[g] = l.AppendAsync(entries(10_000+g, 1, tc.failSize), AfterFsync).Wait(ctx)
				}()
			}
			_, err := l.Append(ctx, entries(9_999, 1, tc.failSize), AfterFsync)
			wantLatchErr(t, "failing append", err)
			wg.Wait()
			for g, err := range asyncErrs {
				wantLatchErr(t, fmt.Sprintf("concurrent append %d", g), err)
			}
			for range 2 {
				if err := <-waitErrs; !errors.Is(err, ErrLatched) {
					t.Fatalf("frontier wait past the frontier: %v, want ErrLatched", err)
				}
			}

			// The latched state.
			select {
			case <-l.Latched():
			default:
				t.Fatal("Latched() not closed after the latch")
			}
			if w, d := l.WrittenNext(), l.DurableNext(); w != cut || d != cut {
				t.Fatalf("latched frontiers written %d durable %d, want both %d", w, d, cut)
			}
			st := l.Status()
			var se *StorageError
			if !st.Latched || !errors.As(st.LastError, &se) || !errors.Is(st.LastError, errInjected) {
				t.Fatalf("status latched %v last error %v", st.Latched, st.LastError)
			}
			if st.WrittenNext != cut || st.DurableNext != cut || st.DurableLagRecords != 0 {
				t.Fatalf("status written %d durable %d lag %d, want %d %d 0",
					st.WrittenNext, st.DurableNext, st.DurableLagRecords, cut, cut)
			}
			if at, ok, err := readCutMarker(fs, dir); err != nil || !ok || at != cut {
				t.Fatalf("cut marker %d %v %v, want %d", at, ok, err, cut)
			}
			if _, err := l.WaitWritten(ctx, cut+1); !errors.Is(err, ErrLatched) {
				t.Fatalf("WaitWritten past the frontier: %v, want ErrLatched", err)
			}
			if got, err := l.WaitWritten(ctx, cut); err != nil || got != cut {
				t.Fatalf("WaitWritten at the frontier: %d %v", got, err)
			}
			for _, d := range []Boundary{AfterFlush, AfterFsync} {
				_, err := l.Append(ctx, entries(20_000, 1, recSize), d)
				wantLatchErr(t, "later "+d.String()+" append", err)
			}
			wantLatchErr(t, "sync", l.Sync(ctx))
			wantLatchErr(t, "seal", l.Seal(ctx, l.Epoch()+1))
			wantIntact(t, readAll(t, l, false), 0, int(cut), recSize)
			if tc.rewroteHeader {
				if _, err := fs.Stat(fs.PathJoin(dir, segmentName(cut))); err != nil {
					t.Fatalf("the failed rollover left no segment %d: %v", cut, err)
				}
			}
			wantLatchErr(t, "close", l.Close())

			// Reopen without the failure: the cut.
			fault.Off()
			l = mustOpen(t, fs, dir, opts)
			rep := l.Recovery()
			if !rep.LatchedCut || rep.CutTo != cut || rep.End != cut {
				t.Fatalf("recovery latched cut %v to %d end %d, want a cut to %d", rep.LatchedCut, rep.CutTo, rep.End, cut)
			}
			if rep.RewroteHeader != tc.rewroteHeader {
				t.Fatalf("recovery rewrote header %v, want %v", rep.RewroteHeader, tc.rewroteHeader)
			}
			if _, err := fs.Stat(fs.PathJoin(dir, cutMarkerName)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("cut marker after reopen: %v", err)
			}
			if w, d := l.WrittenNext(), l.DurableNext(); w != cut || d != cut {
				t.Fatalf("reopened frontiers written %d durable %d, want both %d", w, d, cut)
			}
			wantIntact(t, readAll(t, l, true), 0, int(cut), recSize)
			res, err := l.Append(ctx, entries(int(cut), 5, recSize), AfterFsync)
			if err != nil || res.First != cut || res.Next != cut+5 {
				t.Fatalf("append after the cut: %+v %v, want %d..%d", res, err, cut, cut+5)
			}
			wantIntact(t, readAll(t, l, true), 0, int(cut)+5, recSize)
			if err := l.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}

			// A clean reopen keeps the appends made after the cut.
			l = mustOpen(t, fs, dir, opts)
			defer l.Close()
			if rep := l.Recovery(); rep.LatchedCut || rep.Stop != nil {
				t.Fatalf("clean reopen: latched cut %v stop %v", rep.LatchedCut, rep.Stop)
			}
			wantIntact(t, readAll(t, l, true), 0, int(cut)+5, recSize)
		})
	}
}

// A log latches on a failed segment sync and its cut marker cannot be
// written either (the same failing disk). The records the sync lost may
// still read back from the page cache, and a reopen's sync, on a new
// descriptor, reports nothing (the kernel told the old one): an Open in
// this process still cuts them, from what the latch remembered, and the
// Close writes the marker once it can, for an Open in the next process.
func TestLatchWithoutItsCutMarker(t *testing.T) {
	for _, markerAtClose := range []bool{false, true} {
		ctx := testCtx(t)
		var failSync, failMarker atomic.Bool
		fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
			if failSync.Load() && strings.HasSuffix(op.Path, segmentSuffix) && op.Kind == errorfs.OpFileSyncData {
				return errInjected
			}
			if failMarker.Load() && strings.Contains(op.Path, cutMarkerName) && op.Kind == errorfs.OpCreate {
				return errInjected
			}
			return nil
		}))
		opts := Options{BackgroundSyncInterval: -1, SyncBytesThreshold: -1, Logger: slog.New(slog.DiscardHandler)}
		l := mustOpen(t, fs, "log", opts)
		if _, err := l.Append(ctx, entries(0, 10, 100), AfterFsync); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(ctx, entries(10, 10, 100), AfterFlush); err != nil {
			t.Fatal(err)
		}
		failSync.Store(true)
		failMarker.Store(true)
		if err := l.Sync(ctx); err == nil {
			t.Fatal("sync succeeded")
		}
		durable := l.DurableNext()
		failMarker.Store(!markerAtClose)
		_ = l.Close()
		failSync.Store(false)
		if markerAtClose {
			forgetCut(fs, "log") // the next process remembers nothing: the marker must say it
		}
		l = mustOpen(t, fs, "log", opts)
		if got := l.DurableNext(); got != durable || !l.Recovery().LatchedCut {
			t.Fatalf("marker written at close %v: latched durable to %d, reopened durable to %d (cut %v)",
				markerAtClose, durable, got, l.Recovery().LatchedCut)
		}
		mustClose(t, l)
		if _, ok, err := pendingCut(fs, "log", true); ok || err != nil {
			t.Fatalf("marker written at close %v: a cut still pending after the open carried it out (%v)", markerAtClose, err)
		}
	}
}

// A cut this process remembers for a log whose directory was then emptied
// (its queue deleted and made again) is not carried out on the new log.
func TestLatchRememberedCutIsNotAnotherLogs(t *testing.T) {
	fs := vfs.NewMem()
	rememberCut(fs, "log", 7)
	l := mustOpen(t, fs, "log", Options{BackgroundSyncInterval: -1, SyncBytesThreshold: -1, Logger: slog.New(slog.DiscardHandler)})
	defer mustClose(t, l)
	if rep := l.Recovery(); rep.LatchedCut || l.WrittenNext() != 0 {
		t.Fatalf("a new log: cut %v to %d, written to %d; want no cut, at 0", rep.LatchedCut, rep.CutTo, l.WrittenNext())
	}
	if _, ok, _ := pendingCut(fs, "log", true); ok {
		t.Fatal("the remembered cut outlived the new log's open")
	}
}
