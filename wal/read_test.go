package wal

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Tests of reads and of the log's structure: rollover, the sparse index,
// retention, the two frontiers, the tail cache, and the calls that must fail.

// readTestSeed returns the seed of a randomized test: WAL_SEED when set, the
// clock otherwise. It logs the seed so a failure can be replayed.
func readTestSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("WAL_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("WAL_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (WAL_SEED=%d replays it)", seed, seed)
	return seed
}

// checkRecords fails unless got is exactly want.
func checkRecords(t *testing.T, what string, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i].Offset != want[i].Offset || got[i].Type != want[i].Type || !bytes.Equal(got[i].Payload, want[i].Payload) {
			t.Fatalf("%s: record %d is offset %d type %d %q, want offset %d type %d %q", what, i,
				got[i].Offset, got[i].Type, got[i].Payload, want[i].Offset, want[i].Type, want[i].Payload)
		}
	}
}

// genRecords is records from..to-1 of generation gen, as genEntry makes them.
func genRecords(gen int, from, to uint64) []Record {
	var out []Record
	for i := from; i < to; i++ {
		e := genEntry(gen, i)
		out = append(out, Record{Offset: i, Type: e.Type, Payload: e.Payload})
	}
	return out
}

// TestRolloverUnderConcurrentAppends has eight goroutines append batches to a
// log with tiny segments. Every offset must belong to exactly one append,
// each goroutine's appends must take increasing offsets, and reading the log
// must return every record once, in order, without gaps, before and after a
// reopen.
func TestRolloverUnderConcurrentAppends(t *testing.T) {
	fs, dir := vfs.NewMem(), "log"
	opts := Options{SegmentSize: 4 << 10, IndexSpacing: 256}
	l := mustOpen(t, fs, dir, opts)
	defer func() { l.Close() }()
	ctx := testCtx(t)

	const writers, appends = 8, 60
	type appended struct {
		res     AppendResult
		entries []Entry
	}
	done := make([][]appended, writers)
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range appends {
				es := make([]Entry, 1+(g+s)%3)
				for j := range es {
					p := fmt.Appendf(nil, "writer%d-append%d-entry%d-", g, s, j)
					es[j] = Entry{Type: byte(1 + g), Payload: append(p, bytes.Repeat([]byte{'x'}, (g*7+s*13+j)%90)...)}
				}
				d := AfterFlush
				if s%4 == 0 {
					d = AfterFsync
				}
				res, err := l.Append(ctx, es, d)
				if err != nil {
					errs <- fmt.Errorf("writer %d append %d: %w", g, s, err)
					return
				}
				done[g] = append(done[g], appended{res, es})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// Who owns each offset.
	want := make([]Record, l.WrittenNext())
	owned := make([]bool, len(want))
	for g, as := range done {
		last := uint64(0)
		for _, a := range as {
			if a.res.First < last || a.res.Next-a.res.First != uint64(len(a.entries)) {
				t.Fatalf("writer %d: append took %+v after %d for %d entries", g, a.res, last, len(a.entries))
			}
			last = a.res.Next
			for i, e := range a.entries {
				o := a.res.First + uint64(i)
				if o >= uint64(len(want)) || owned[o] {
					t.Fatalf("offset %d given out twice or past WrittenNext %d", o, len(want))
				}
				owned[o] = true
				want[o] = Record{Offset: o, Type: e.Type, Payload: e.Payload}
			}
		}
	}
	for o, ok := range owned {
		if !ok {
			t.Fatalf("offset %d belongs to no append", o)
		}
	}
	checkRecords(t, "read after concurrent appends", readAll(t, l, false), want)
	st := l.Status()
	if st.Segments <= 3 || st.Segments != len(segmentBases(t, fs, dir)) {
		t.Fatalf("%d segments in the status, %d files: want more than 3, the same", st.Segments, len(segmentBases(t, fs, dir)))
	}

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	opts.TailCacheBytes = -1
	l = mustOpen(t, fs, dir, opts)
	checkRecords(t, "read after reopen", readAll(t, l, true), want)
}

// TestIndexLookupAtRandomOffsets reads single records and short runs at
// random offsets of a reopened log with the tail cache off, so every read
// goes through the sparse index, and the sealed segments get their index
// built lazily by the first read that needs them.
func TestIndexLookupAtRandomOffsets(t *testing.T) {
	seed := readTestSeed(t)
	for _, tc := range []struct {
		name string
		fs   func(t *testing.T) (vfs.FS, string)
	}{
		{"mem", func(t *testing.T) (vfs.FS, string) { return vfs.NewMem(), "log" }},
		{"disk", func(t *testing.T) (vfs.FS, string) { return vfs.Default, t.TempDir() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, dir := tc.fs(t)
			ctx := testCtx(t)
			opts := Options{SegmentSize: 8 << 10, IndexSpacing: 256, BackgroundSyncInterval: -1}
			l := mustOpen(t, fs, dir, opts)
			const n = 1200
			for i := uint64(0); i < n; i += 8 {
				var es []Entry
				for j := i; j < i+8; j++ {
					es = append(es, genEntry(0, j))
				}
				if _, err := l.Append(ctx, es, AfterFlush); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			opts.TailCacheBytes = -1
			l = mustOpen(t, fs, dir, opts)
			defer l.Close()
			if l.cache != nil {
				t.Fatal("tail cache is on")
			}
			l.segMu.RLock()
			sealed := l.segs[:len(l.segs)-1]
			l.segMu.RUnlock()
			if len(sealed) < 8 {
				t.Fatalf("only %d sealed segments", len(sealed))
			}
			for _, s := range sealed {
				s.mu.Lock()
				indexed := s.indexed
				s.mu.Unlock()
				if indexed {
					t.Fatalf("sealed segment %d indexed at open", s.base)
				}
			}

			want := genRecords(0, 0, n)
			rng := rand.New(rand.NewPCG(seed, 0))
			for range 400 {
				o := rng.Uint64N(n)
				budget := 0
				if rng.IntN(4) == 0 {
					budget = rng.IntN(2000)
				}
				recs, err := l.ReadDurable(o, budget)
				if err != nil {
					t.Fatalf("read at %d: %v", o, err)
				}
				checkRecords(t, fmt.Sprintf("read at %d with budget %d", o, budget),
					recs, want[o:o+uint64(budgetCount(want, o, n, budget))])
			}
			// The lazily built indexes are sparse and in order.
			for _, s := range sealed {
				s.mu.Lock()
				if s.indexed {
					if len(s.index) == 0 || s.index[0] != (indexEntry{offset: s.base, pos: segmentHeaderSize}) {
						t.Fatalf("segment %d index starts %v", s.base, s.index[:min(1, len(s.index))])
					}
					for i := 1; i < len(s.index); i++ {
						a, b := s.index[i-1], s.index[i]
						if b.offset <= a.offset || b.pos-a.pos < int64(opts.IndexSpacing) || b.offset >= s.end {
							t.Fatalf("segment %d index entries %v then %v", s.base, a, b)
						}
					}
				}
				s.mu.Unlock()
			}
		})
	}
}

// budgetCount is how many records from from up to limit a read with budget
// maxBytes returns: those whose payloads fit, and always the first.
func budgetCount(recs []Record, from, limit uint64, maxBytes int) int {
	n, total := 0, 0
	for o := from; o < limit; o++ {
		size := len(recs[o].Payload)
		if n > 0 && total+size > maxBytes {
			break
		}
		n++
		total += size
	}
	return n
}

// TestAdvanceHeadWhileAppending moves the head up in steps while a goroutine
// keeps appending. After each step reads below the head fail, reads at and
// above it work, the segment files wholly below it are gone, and the head
// cannot pass the durable frontier. A reopen starts at the first segment
// that remained.
func TestAdvanceHeadWhileAppending(t *testing.T) {
	fs, dir := vfs.NewMem(), "log"
	opts := Options{SegmentSize: 4 << 10, IndexSpacing: 256}
	l := mustOpen(t, fs, dir, opts)
	defer func() { l.Close() }()
	ctx := testCtx(t)

	const batch, size = 6, 60
	stop := make(chan struct{})
	appended := make(chan error, 1)
	go func() {
		for i := 0; ; i += batch {
			select {
			case <-stop:
				appended <- nil
				return
			default:
			}
			res, err := l.Append(ctx, entries(i, batch, size), AfterFsync)
			if err == nil && res.First != uint64(i) {
				err = fmt.Errorf("append %d took offset %d", i, res.First)
			}
			if err != nil {
				appended <- err
				return
			}
		}
	}()

	checkRead := func(from uint64) {
		t.Helper()
		recs, err := l.ReadWritten(from, 2000)
		if err != nil || len(recs) == 0 {
			t.Fatalf("read at %d: %d records, %v", from, len(recs), err)
		}
		for i, r := range recs {
			if o := from + uint64(i); r.Offset != o || !bytes.Equal(r.Payload, payload(int(o), size)) {
				t.Fatalf("read at %d: record %d is %d %q", from, o, r.Offset, r.Payload)
			}
		}
	}
	var head uint64
	for step := uint64(1); step <= 20; step++ {
		head = step * 150
		// Durable past the head, so that the head and the next record exist.
		if _, err := l.WaitDurable(ctx, head+2); err != nil {
			t.Fatal(err)
		}
		if err := l.AdvanceHead(head); err != nil {
			t.Fatalf("advance head to %d: %v", head, err)
		}
		if got, st := l.Head(), l.Status(); got != head || st.Head != head {
			t.Fatalf("head %d, status head %d, want %d", got, st.Head, head)
		}
		for _, o := range []uint64{0, head - 1} {
			if _, err := l.ReadWritten(o, 1<<20); !errors.Is(err, ErrBeforeHead) {
				t.Fatalf("read at %d below head %d: %v", o, head, err)
			}
		}
		checkRead(head)
		checkRead(head + 1)
		if bases := segmentBases(t, fs, dir); bases[0] > head || (len(bases) > 1 && bases[1] <= head) {
			t.Fatalf("segments %v after moving the head to %d: want only the one holding it and later", bases, head)
		}
		if err := l.AdvanceHead(l.WrittenNext() + 1<<40); !errors.Is(err, ErrHeadBeyondDurable) {
			t.Fatalf("advance head past durable: %v", err)
		}
		if err := l.AdvanceHead(head - 100); err != nil || l.Head() != head {
			t.Fatalf("advance head backwards: %v, head %d", err, l.Head())
		}
	}
	close(stop)
	if err := <-appended; err != nil {
		t.Fatal(err)
	}

	n := l.WrittenNext()
	checkAll := func(what string, from uint64) {
		t.Helper()
		var want []Record
		for o := from; o < n; o++ {
			want = append(want, Record{Offset: o, Type: 1, Payload: payload(int(o), size)})
		}
		checkRecords(t, what, readAll(t, l, true), want)
	}
	checkAll("read from the head", head)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, fs, dir, opts)
	first := segmentBases(t, fs, dir)[0]
	if got := l.Head(); got != first || got > head || l.WrittenNext() != n {
		t.Fatalf("reopen: head %d WrittenNext %d, want head %d (at or below %d), %d", got, l.WrittenNext(), first, head, n)
	}
	checkAll("read after reopen", first)
}

// TestReadWrittenAndDurableFrontiers reads with background sync off, so the
// last records are written but not durable. ReadWritten returns them,
// ReadDurable stops before them, reads past a frontier fail, and the byte
// budget bounds every read but never returns nothing. Once with the tail
// cache and once without, so both read paths apply the budget.
func TestReadWrittenAndDurableFrontiers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cache int64
	}{
		{"tail cache", 0},
		{"segment files", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			opts := Options{SegmentSize: 1 << 20, BackgroundSyncInterval: -1, SyncBytesThreshold: -1, TailCacheBytes: tc.cache}
			l := mustOpen(t, vfs.NewMem(), "log", opts)
			defer l.Close()

			const durable, written, large = 40, 75, 70
			want := genRecords(0, 0, written)
			want[large].Payload = bytes.Repeat([]byte("L"), 5000) // larger than most budgets
			for i := 0; i < written; i += 5 {
				d := AfterFsync
				if i >= durable {
					d = AfterFlush
				}
				var es []Entry
				for _, r := range want[i : i+5] {
					es = append(es, Entry{Type: r.Type, Payload: r.Payload})
				}
				if _, err := l.Append(ctx, es, d); err != nil {
					t.Fatal(err)
				}
			}
			if l.DurableNext() != durable || l.WrittenNext() != written {
				t.Fatalf("durable %d written %d, want %d and %d", l.DurableNext(), l.WrittenNext(), durable, written)
			}

			checkRecords(t, "written records", readAll(t, l, false), want)
			checkRecords(t, "durable records", readAll(t, l, true), want[:durable])
			recs, err := l.ReadWritten(durable, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			checkRecords(t, "unsynced records", recs, want[durable:])
			for _, c := range []struct {
				name  string
				read  func(uint64, int) ([]Record, error)
				from  uint64
				isErr error
			}{
				{"durable at the frontier", l.ReadDurable, durable, nil},
				{"durable past the frontier", l.ReadDurable, durable + 1, ErrBeyondFrontier},
				{"written at the frontier", l.ReadWritten, written, nil},
				{"written past the frontier", l.ReadWritten, written + 1, ErrBeyondFrontier},
			} {
				recs, err := c.read(c.from, 1<<20)
				if !errors.Is(err, c.isErr) || len(recs) != 0 {
					t.Fatalf("%s: %d records, %v, want none and %v", c.name, len(recs), err, c.isErr)
				}
			}

			recs, err = l.ReadWritten(large, 10)
			if err != nil || len(recs) != 1 || len(recs[0].Payload) != 5000 {
				t.Fatalf("read of one record over the budget: %d records, %v", len(recs), err)
			}
			for _, from := range []uint64{0, 5, 38, 39, 65, 69, large, 71} {
				for _, budget := range []int{0, 1, 100, 150, 333, 1000, 5000, 6000} {
					for _, f := range []struct {
						name  string
						read  func(uint64, int) ([]Record, error)
						limit uint64
					}{{"ReadWritten", l.ReadWritten, written}, {"ReadDurable", l.ReadDurable, durable}} {
						if from > f.limit {
							continue
						}
						recs, err := f.read(from, budget)
						if err != nil {
							t.Fatalf("%s(%d, %d): %v", f.name, from, budget, err)
						}
						n := budgetCount(want, from, f.limit, budget)
						checkRecords(t, fmt.Sprintf("%s(%d, %d)", f.name, from, budget), recs, want[from:from+uint64(n)])
					}
				}
			}

			if err := l.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if l.DurableNext() != written {
				t.Fatalf("durable %d after a sync, want %d", l.DurableNext(), written)
			}
			checkRecords(t, "durable records after a sync", readAll(t, l, true), want)
		})
	}
}

// TestTailCacheHitAndMissAgree reads the same ranges from the tail cache
// right after writing and from the segment files of the reopened log with the
// cache off: both must return the same records, which are the ones written.
func TestTailCacheHitAndMissAgree(t *testing.T) {
	fs, dir := vfs.NewMem(), "log"
	ctx := testCtx(t)
	opts := Options{SegmentSize: 8 << 10, IndexSpacing: 256, BackgroundSyncInterval: -1}
	l := mustOpen(t, fs, dir, opts)
	defer func() { l.Close() }()

	const n = 300
	var want []Record
	for i := uint64(0); i < n; i++ {
		p := fmt.Appendf(nil, "%d:", i)
		p = append(p, bytes.Repeat([]byte{byte(i)}, int(i*53%301))...)
		want = append(want, Record{Offset: i, Type: byte(1 + i*7%255), Payload: p})
	}
	for i := 0; i < n; i += 6 {
		var es []Entry
		for _, r := range want[i : i+6] {
			es = append(es, Entry{Type: r.Type, Payload: r.Payload})
		}
		if _, err := l.Append(ctx, es, AfterFlush); err != nil {
			t.Fatal(err)
		}
	}
	l.cache.wait()
	hits := 0
	for o := uint64(0); o < n; o++ {
		if _, ok := l.cached(o); ok {
			hits++
		}
	}
	if hits != n {
		t.Fatalf("%d of %d records in the tail cache", hits, n)
	}

	reads := []struct {
		from   uint64
		budget int
	}{{0, 1 << 20}, {0, 0}, {17, 500}, {100, 4096}, {150, 1}, {299, 10}}
	readRanges := func(l *Log) [][]Record {
		var out [][]Record
		for _, r := range reads {
			recs, err := l.ReadWritten(r.from, r.budget)
			if err != nil {
				t.Fatalf("read at %d: %v", r.from, err)
			}
			var cp []Record
			for _, rec := range recs {
				cp = append(cp, Record{Offset: rec.Offset, Type: rec.Type, Payload: bytes.Clone(rec.Payload)})
			}
			out = append(out, cp)
		}
		return out
	}
	fromCache := readRanges(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	opts.TailCacheBytes = -1
	l = mustOpen(t, fs, dir, opts)
	if l.cache != nil {
		t.Fatal("tail cache is on")
	}
	fromFiles := readRanges(l)
	for i, r := range reads {
		what := fmt.Sprintf("read at %d with budget %d", r.from, r.budget)
		checkRecords(t, what+" from the files", fromFiles[i], fromCache[i])
		checkRecords(t, what, fromCache[i], want[r.from:r.from+uint64(budgetCount(want, r.from, n, r.budget))])
	}
}

// TestAppendRejectsInvalidBatches checks that invalid batches fail before
// they take an offset, through both Append and AppendAsync.
func TestAppendRejectsInvalidBatches(t *testing.T) {
	ctx := testCtx(t)
	opts := Options{SegmentSize: 4 << 10, MaxRecordSize: 1000}
	l := mustOpen(t, vfs.NewMem(), "log", opts)
	defer l.Close()
	for _, tc := range []struct {
		name    string
		entries []Entry
		dur     Boundary
		want    error // nil: any error
	}{
		{"type 0", []Entry{{Type: 1, Payload: []byte("a")}, {Type: 0, Payload: []byte("b")}}, AfterFlush, ErrInvalidType},
		{"no entries", nil, AfterFsync, ErrEmptyBatch},
		{"empty slice", []Entry{}, AfterFlush, ErrEmptyBatch},
		{"record over MaxRecordSize", []Entry{{Type: 1, Payload: make([]byte, 1001)}}, AfterFlush, ErrTooLarge},
		{"batch over a segment", entries(0, 5, 1000), AfterFsync, ErrTooLarge},
		{"unknown durability", entries(0, 1, 10), Boundary(0), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.Append(ctx, tc.entries, tc.dur)
			c := l.AppendAsync(tc.entries, tc.dur)
			<-c.Done()
			_, asyncErr := c.Result()
			for _, err := range []error{err, asyncErr} {
				if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
					t.Fatalf("got %v, want %v", err, tc.want)
				}
			}
		})
	}
	if res, err := l.Append(ctx, entries(0, 3, 1000), AfterFsync); err != nil || res.First != 0 {
		t.Fatalf("valid append after the rejected ones: %+v %v", res, err)
	}
}

// TestSealEpoch checks that Seal only advances the epoch, makes what was
// written durable, and that the epoch survives a reopen.
func TestSealEpoch(t *testing.T) {
	fs, dir := vfs.NewMem(), "log"
	ctx := testCtx(t)
	opts := Options{BackgroundSyncInterval: -1, SyncBytesThreshold: -1}
	l := mustOpen(t, fs, dir, opts)
	defer func() { l.Close() }()
	if err := l.Seal(ctx, 0); !errors.Is(err, ErrEpochNotAdvanced) {
		t.Fatalf("seal at the initial epoch: %v", err)
	}
	if _, err := l.Append(ctx, entries(0, 5, 50), AfterFlush); err != nil {
		t.Fatal(err)
	}
	if err := l.Seal(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if l.Epoch() != 3 || l.DurableNext() != 5 {
		t.Fatalf("after seal: epoch %d durable %d, want 3 and 5", l.Epoch(), l.DurableNext())
	}
	for _, e := range []uint64{3, 2} {
		if err := l.Seal(ctx, e); !errors.Is(err, ErrEpochNotAdvanced) {
			t.Fatalf("seal at %d after 3: %v", e, err)
		}
	}
	for _, next := range []uint64{10, 11} {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		prev := l.Epoch()
		l = mustOpen(t, fs, dir, opts)
		if l.Epoch() != prev || l.Status().Epoch != prev {
			t.Fatalf("reopen: epoch %d, status epoch %d, want %d", l.Epoch(), l.Status().Epoch, prev)
		}
		if err := l.Seal(ctx, prev); !errors.Is(err, ErrEpochNotAdvanced) {
			t.Fatalf("seal at %d after reopen: %v", prev, err)
		}
		if err := l.Seal(ctx, next); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOpenLockedDirectory checks that a second Open of an open log fails
// with ErrLocked, and succeeds once the first is closed, with a LOCK file
// and with LockInProcess (which leaves no LOCK file).
func TestOpenLockedDirectory(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fs        func(t *testing.T) (vfs.FS, string)
		inProcess bool
	}{
		{"mem", func(t *testing.T) (vfs.FS, string) { return vfs.NewMem(), "log" }, false},
		{"disk", func(t *testing.T) (vfs.FS, string) { return vfs.Default, t.TempDir() }, false},
		{"mem-in-process", func(t *testing.T) (vfs.FS, string) { return vfs.NewMem(), "log" }, true},
		{"disk-in-process", func(t *testing.T) (vfs.FS, string) { return vfs.Default, t.TempDir() }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, dir := tc.fs(t)
			opts := Options{FS: fs, LockInProcess: tc.inProcess}
			l := mustOpen(t, fs, dir, opts)
			if second, err := Open(dir, opts); !errors.Is(err, ErrLocked) {
				if second != nil {
					second.Close()
				}
				l.Close()
				t.Fatalf("second open: %v, want ErrLocked", err)
			}
			if _, err := fs.Stat(fs.PathJoin(dir, lockName)); tc.inProcess != errors.Is(err, os.ErrNotExist) {
				t.Errorf("LOCK file with LockInProcess %v: %v", tc.inProcess, err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = mustOpen(t, fs, dir, opts)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestReadAllocationFollowsTheData checks that a read with a huge budget (a
// caller's "no limit") allocates for the records it finds, not for the
// budget.
func TestReadAllocationFollowsTheData(t *testing.T) {
	ctx := testCtx(t)
	l := mustOpen(t, vfs.NewMem(), "log", Options{TailCacheBytes: -1})
	defer l.Close()
	if _, err := l.Append(ctx, entries(0, 100, 100), AfterFsync); err != nil {
		t.Fatal(err)
	}
	for _, budget := range []int{1 << 30, math.MaxInt} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		recs, err := l.ReadDurable(0, budget)
		runtime.ReadMemStats(&after)
		if err != nil || len(recs) != 100 {
			t.Fatalf("read with budget %d: %d records, %v", budget, len(recs), err)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
			t.Fatalf("read of %d small records with budget %d allocated %d bytes", len(recs), budget, alloc)
		}
	}
}
