package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// powerLossSeed returns the base seed of the randomized power-loss test:
// WAL_SEED when set, the clock otherwise. It logs it either way.
func powerLossSeed(t *testing.T) int64 {
	t.Helper()
	seed := time.Now().UnixNano()
	if s := os.Getenv("WAL_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("WAL_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (rerun with WAL_SEED=%d)", seed, seed)
	return seed
}

// TestPowerLoss runs seeded iterations of concurrent appenders on the
// crashable in-memory FS, takes a crash clone while they run, and checks
// the log recovered from the clone against what the appenders were told.
func TestPowerLoss(t *testing.T) {
	base := powerLossSeed(t)
	const iterations = 200
	for i := range iterations {
		seed := base + int64(i)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			runPowerLoss(t, seed, -1)
		})
	}
	// A crash that keeps every unsynced byte is a process crash: recovery
	// must keep everything written before it.
	t.Run(fmt.Sprintf("unsynced-100-seed=%d", base), func(t *testing.T) {
		runPowerLoss(t, base, 100)
	})
}

// powerLossAppend is one append an appender saw confirmed.
type powerLossAppend struct {
	res     AppendResult
	dur     Boundary
	entries []Entry
	// beforeClone: the confirmation came before the crash clone started.
	beforeClone bool
}

// runPowerLoss is one iteration; unsyncedPercent below zero lets the seed
// pick 0, 50 or 100.
func runPowerLoss(t *testing.T, seed int64, unsyncedPercent int) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	if unsyncedPercent < 0 {
		unsyncedPercent = []int{0, 50, 100}[rng.IntN(3)]
	}
	appenders := 4 + rng.IntN(5)
	fsyncPercent := []int{10, 50}[rng.IntN(2)] // share of the appends that ask for AfterFsync
	crashAfter := 1 + rng.IntN(60)             // appends confirmed before the clone
	syncInterval := []time.Duration{time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond}[rng.IntN(3)]
	ctx := testCtx(t)
	fs := vfs.NewCrashableMem()
	const dir = "log"
	opts := Options{
		SegmentSize:            16 << 10,
		IndexSpacing:           1 << 10,
		BackgroundSyncInterval: syncInterval,
		SyncBytesThreshold:     8 << 10,
		TailCacheBytes:         -1,
		Logger:                 slog.New(slog.DiscardHandler),
	}
	l := mustOpen(t, fs, dir, opts)
	defer l.Close()

	var (
		mu          sync.Mutex // guards the fields below
		appended    []powerLossAppend
		confirmed   int
		cloneTaken  bool
		reached     = make(chan struct{})
		stop        = make(chan struct{})
		appendersWG sync.WaitGroup
	)
	for a := range appenders {
		arng := rand.New(rand.NewPCG(uint64(seed), uint64(a)+1))
		appendersWG.Add(1)
		go func() {
			defer appendersWG.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				es := make([]Entry, 1+arng.IntN(5))
				for j := range es {
					p := make([]byte, 1+arng.IntN(600))
					for k := range p {
						p[k] = byte(arng.Uint32())
					}
					es[j] = Entry{Type: byte(1 + arng.IntN(255)), Payload: p}
				}
				d := AfterFlush
				if arng.IntN(100) < fsyncPercent {
					d = AfterFsync
				}
				res, err := l.Append(ctx, es, d)
				if err != nil {
					t.Errorf("append: %v", err)
					return
				}
				mu.Lock()
				appended = append(appended, powerLossAppend{res: res, dur: d, entries: es, beforeClone: !cloneTaken})
				if confirmed++; confirmed == crashAfter {
					close(reached)
				}
				mu.Unlock()
			}
		}()
	}
	appendersDone := make(chan struct{})
	go func() { appendersWG.Wait(); close(appendersDone) }()

	// The power loss, while the appenders go on.
	select {
	case <-reached:
	case <-appendersDone:
		t.Fatalf("the appenders stopped before %d appends", crashAfter)
	}
	mu.Lock()
	cloneTaken = true
	mu.Unlock()
	durableBefore, writtenBefore := l.DurableNext(), l.WrittenNext()
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: unsyncedPercent, RNG: rng})
	close(stop)
	<-appendersDone
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if t.Failed() {
		return
	}

	// What the appenders were told.
	byOffset := make(map[uint64]Entry)
	var fsyncNext uint64 // the highest Next confirmed AfterFsync before the clone
	for _, a := range appended {
		if a.res.Next-a.res.First != uint64(len(a.entries)) {
			t.Fatalf("append of %d entries got %+v", len(a.entries), a.res)
		}
		for j, e := range a.entries {
			o := a.res.First + uint64(j)
			if _, dup := byOffset[o]; dup {
				t.Fatalf("offset %d given to two appends", o)
			}
			byOffset[o] = e
		}
		if a.beforeClone && a.dur == AfterFsync {
			fsyncNext = max(fsyncNext, a.res.Next)
		}
	}

	// What the crashed log recovered.
	rl := mustOpen(t, crashed, dir, opts)
	defer rl.Close()
	rep := rl.Recovery()
	written, durable := rl.WrittenNext(), rl.DurableNext()
	t.Logf("unsynced %d%%, %d appenders (%d%% AfterFsync), sync interval %v, %d appends (clone after %d); "+
		"before the clone written %d durable %d fsync-confirmed %d; "+
		"recovered %d (%d segments, stop %v, rewrote header %v)",
		unsyncedPercent, appenders, fsyncPercent, syncInterval, len(appended), crashAfter,
		writtenBefore, durableBefore, fsyncNext, written, rep.Segments, rep.Stop, rep.RewroteHeader)
	if written != durable {
		t.Fatalf("recovered written %d, durable %d", written, durable)
	}
	if durable < durableBefore || durable < fsyncNext {
		t.Fatalf("recovered durable %d below the durable %d or the fsync-confirmed %d before the power loss",
			durable, durableBefore, fsyncNext)
	}
	if unsyncedPercent == 100 && written < writtenBefore {
		t.Fatalf("recovered %d, below the %d written before a crash that kept every byte", written, writtenBefore)
	}
	if head := rl.Head(); head != 0 {
		t.Fatalf("recovered head %d", head)
	}
	recs := readAll(t, rl, false)
	if uint64(len(recs)) != written {
		t.Fatalf("read %d records, want %d", len(recs), written)
	}
	for i, r := range recs {
		want, ok := byOffset[uint64(i)]
		switch {
		case r.Offset != uint64(i):
			t.Fatalf("record %d carries offset %d", i, r.Offset)
		case !ok:
			t.Fatalf("record %d was never confirmed to an appender", i)
		case r.Type != want.Type || !bytes.Equal(r.Payload, want.Payload):
			t.Fatalf("record %d: type %d payload of %d bytes, appended type %d payload of %d bytes",
				i, r.Type, len(r.Payload), want.Type, len(want.Payload))
		}
	}
	// The recovered log takes appends at its end.
	res, err := rl.Append(ctx, entries(0, 1, 50), AfterFsync)
	if err != nil || res.First != written {
		t.Fatalf("append after recovery: %+v %v, want first %d", res, err, written)
	}
}

// TestDirtyReopenSyncsBeforePublishing writes records that are never
// synced, crashes the process (the page cache keeps them) and reopens: the
// records are back, and a power loss right after the reopen keeps them,
// because recovery synced them before publishing them as durable. The
// control takes the power loss before the reopen and loses them.
func TestDirtyReopenSyncsBeforePublishing(t *testing.T) {
	const (
		dir     = "log"
		n       = 50
		recSize = 100
	)
	opts := Options{BackgroundSyncInterval: -1, SyncBytesThreshold: -1, TailCacheBytes: 64 << 10,
		Logger: slog.New(slog.DiscardHandler)}
	for _, tc := range []struct {
		name        string
		reopenFirst bool // reopen on the crashed FS before the power loss
		want        int  // records after the power loss
	}{
		{"reopen-then-power-loss", true, n},
		{"power-loss-before-reopen", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			fs := vfs.NewCrashableMem()
			l := mustOpen(t, fs, dir, opts)
			for i := 0; i < n; i += 10 {
				if _, err := l.Append(ctx, entries(i, 10, recSize), AfterFlush); err != nil {
					t.Fatalf("append %d: %v", i, err)
				}
			}
			if st := l.Status(); st.DurableNext != 0 || st.Syncs != 0 || st.WrittenNext != n {
				t.Fatalf("before the crash: written %d durable %d syncs %d", st.WrittenNext, st.DurableNext, st.Syncs)
			}
			l.crashForTest()

			if tc.reopenFirst {
				l = mustOpen(t, fs, dir, opts)
				if w, d := l.WrittenNext(), l.DurableNext(); w != n || d != n {
					t.Fatalf("reopen after the process crash: written %d durable %d, want %d", w, d, n)
				}
				wantIntact(t, readAll(t, l, true), 0, n, recSize)
				// The power loss comes while the reopened log is still open,
				// before its Close could sync anything.
				fs = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
				if err := l.Close(); err != nil {
					t.Fatalf("close: %v", err)
				}
			} else {
				fs = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
			}

			l = mustOpen(t, fs, dir, opts)
			defer l.Close()
			if w, d := l.WrittenNext(), l.DurableNext(); w != uint64(tc.want) || d != uint64(tc.want) {
				t.Fatalf("after the power loss: written %d durable %d, want %d", w, d, tc.want)
			}
			wantIntact(t, readAll(t, l, true), 0, tc.want, recSize)
		})
	}
}

// TestLoseUnsyncedOnNextOpen cuts a closed log on a real directory back to
// a durable end, as a power loss would, and checks the reopened log and the
// appends after it.
func TestLoseUnsyncedOnNextOpen(t *testing.T) {
	const (
		durableRecs = 100
		flushedRecs = 50
		recSize     = 100
		newSize     = 40 // payload size of the appends after the cut, unlike the cut ones
	)
	for _, tc := range []struct {
		name        string
		segmentSize int64
		removes     bool // the cut removes whole segment files
	}{
		{"one-segment", 0, false},
		{"cut-removes-segments", 4 << 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			fs, dir := vfs.Default, t.TempDir()
			opts := Options{SegmentSize: tc.segmentSize, BackgroundSyncInterval: -1, SyncBytesThreshold: -1,
				TailCacheBytes: 64 << 10, Logger: slog.New(slog.DiscardHandler)}
			l := mustOpen(t, fs, dir, opts)
			for i := 0; i < durableRecs+flushedRecs; i += 10 {
				d := AfterFsync
				if i >= durableRecs {
					d = AfterFlush
				}
				if _, err := l.Append(ctx, entries(i, 10, recSize), d); err != nil {
					t.Fatalf("append %d: %v", i, err)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			var wantRemoved []uint64
			names, err := fs.List(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range names {
				if base, ok := parseSegmentName(name); ok && base > durableRecs {
					wantRemoved = append(wantRemoved, base)
				}
			}
			if tc.removes != (len(wantRemoved) > 0) {
				t.Fatalf("segments past the cut: %v", wantRemoved)
			}

			if err := LoseUnsyncedOnNextOpen(fs, dir, durableRecs); err != nil {
				t.Fatalf("LoseUnsyncedOnNextOpen: %v", err)
			}
			l = mustOpen(t, fs, dir, opts)
			rep := l.Recovery()
			if !rep.LatchedCut || rep.CutTo != durableRecs {
				t.Fatalf("recovery latched cut %v to %d, want a cut to %d", rep.LatchedCut, rep.CutTo, durableRecs)
			}
			if fmt.Sprint(rep.RemovedSegments) != fmt.Sprint(wantRemoved) {
				t.Fatalf("removed segments %v, want %v", rep.RemovedSegments, wantRemoved)
			}
			for _, base := range wantRemoved {
				if _, err := fs.Stat(fs.PathJoin(dir, segmentName(base))); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("segment %d after the cut: %v", base, err)
				}
			}
			if w, d := l.WrittenNext(), l.DurableNext(); w != durableRecs || d != durableRecs {
				t.Fatalf("after the cut: written %d durable %d, want %d", w, d, durableRecs)
			}
			wantIntact(t, readAll(t, l, true), 0, durableRecs, recSize)
			res, err := l.Append(ctx, entries(durableRecs, 5, newSize), AfterFsync)
			if err != nil || res.First != durableRecs || res.Next != durableRecs+5 {
				t.Fatalf("append after the cut: %+v %v", res, err)
			}
			check := func(l *Log) {
				t.Helper()
				recs := readAll(t, l, true)
				if len(recs) != durableRecs+5 {
					t.Fatalf("read %d records, want %d", len(recs), durableRecs+5)
				}
				wantIntact(t, recs[:durableRecs], 0, durableRecs, recSize)
				wantIntact(t, recs[durableRecs:], durableRecs, 5, newSize)
			}
			check(l)
			if err := l.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}

			l = mustOpen(t, fs, dir, opts)
			defer l.Close()
			if rep := l.Recovery(); rep.LatchedCut || rep.Stop != nil || rep.End != durableRecs+5 {
				t.Fatalf("clean reopen: latched cut %v stop %v end %d", rep.LatchedCut, rep.Stop, rep.End)
			}
			check(l)
		})
	}
}

// CutBack drops a closed log's records from an offset on at its next
// open, crash safe: cut inside the active segment, inside a sealed one
// (the later segments go), and below the head (an empty log at the cut);
// a power loss right after CutBack still cuts; new records take the
// offsets the cut freed.
func TestCutBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		to   uint64
	}{{"active segment", 95}, {"sealed segment", 10}, {"below the head", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			opts := Options{FS: mem, SegmentSize: 4 << 10, BackgroundSyncInterval: -1}
			l, err := Open("log", opts)
			if err != nil {
				t.Fatal(err)
			}
			payload := make([]byte, 200)
			for range 100 {
				if _, err := l.Append(context.Background(), []Entry{{Type: 1, Payload: payload}}, AfterFsync); err != nil {
					t.Fatal(err)
				}
			}
			if len(l.segs) < 3 {
				t.Fatalf("%d segments, want several", len(l.segs))
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if err := CutBack(mem, "log", tc.to); err != nil {
				t.Fatal(err)
			}
			// A cut already pending at a lower offset wins.
			if err := CutBack(mem, "log", tc.to+5); err != nil {
				t.Fatal(err)
			}
			crashed := mem.CrashClone(vfs.CrashCloneCfg{})
			opts.FS = crashed
			l, err = Open("log", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if got := l.WrittenNext(); got != tc.to {
				t.Fatalf("after the cut the log ends at %d, want %d", got, tc.to)
			}
			if tc.to > 0 {
				recs, err := l.ReadWritten(0, 1<<20)
				if err != nil || len(recs) == 0 || recs[0].Offset != 0 {
					t.Fatalf("records before the cut: %d, %v", len(recs), err)
				}
			}
			res, err := l.Append(context.Background(), []Entry{{Type: 2, Payload: []byte("after")}}, AfterFsync)
			if err != nil || res.First != tc.to {
				t.Fatalf("append after the cut at %d, %v; want offset %d", res.First, err, tc.to)
			}
		})
	}
}
