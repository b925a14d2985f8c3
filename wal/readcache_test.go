package wal

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// countReads wraps a memory FS and counts the reads of files.
func countReads(reads *atomic.Int64) vfs.FS {
	return errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileReadAt || op.Kind == errorfs.OpFileRead {
			reads.Add(1)
		}
		return nil
	}))
}

// readEach reads offsets from to to one record at a time and checks each is
// the record appended (want gives its payload).
func readEach(t *testing.T, l *Log, from, to uint64, want func(int) []byte) {
	t.Helper()
	for off := from; off < to; off++ {
		recs, err := l.ReadWritten(off, 1)
		if err != nil || len(recs) != 1 || recs[0].Offset != off || !bytes.Equal(recs[0].Payload, want(int(off))) {
			t.Fatalf("read %d: %d records, %v", off, len(recs), err)
		}
	}
}

// Blocks leaving a small tail window go to the node's read cache while a
// reader trails behind them, and that reader is served from it without
// reading a segment file; without the read cache, the same reads go to the
// files.
func TestReadCacheTakesBlocksLeavingTheTail(t *testing.T) {
	const n, size = 2000, 100
	for _, withCache := range []bool{true, false} {
		var reads atomic.Int64
		var rc *ReadCache
		if withCache {
			var err error
			if rc, err = NewReadCache(4 << 20); err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
		}
		l := mustOpen(t, countReads(&reads), "log", Options{TailCacheBytes: 16 << 10, ReadCache: rc})
		trail := uint64(0) // the reader's next record
		for i := 0; i < n; i += 50 {
			if _, err := l.Append(context.Background(), entries(i, 50, size), AfterFlush); err != nil {
				t.Fatal(err)
			}
			readEach(t, l, trail, trail+1, func(i int) []byte { return payload(i, size) })
			trail++
		}
		if rc != nil {
			rc.wait()
		}
		reads.Store(0)
		before := l.Status()
		readEach(t, l, trail, n, func(i int) []byte { return payload(i, size) })
		st := l.Status()
		st.ReadCacheHits -= before.ReadCacheHits
		st.TailCacheHits -= before.TailCacheHits
		st.TailCacheMisses -= before.TailCacheMisses
		left := n - trail
		if withCache {
			if got := reads.Load(); got != 0 {
				t.Fatalf("with the read cache: %d file reads (read cache hits %d, tail hits %d)", got, st.ReadCacheHits, st.TailCacheHits)
			}
			if st.ReadCacheHits+st.TailCacheHits != left || st.ReadCacheHits < left/2 || st.TailCacheMisses != st.ReadCacheHits {
				t.Fatalf("read cache hits %d, tail hits %d, tail misses %d, of %d", st.ReadCacheHits, st.TailCacheHits, st.TailCacheMisses, left)
			}
			if s := rc.Stats(); s.Hits != st.ReadCacheHits+before.ReadCacheHits || s.Held <= 0 {
				t.Fatalf("cache stats %+v", s)
			}
		} else if reads.Load() == 0 || st.ReadCacheHits != 0 {
			t.Fatalf("without the read cache: %d file reads, %d read cache hits", reads.Load(), st.ReadCacheHits)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// A block that every reader has passed is not offered to the read cache
// when it leaves the tail window: readers at the writer will not read it
// again. Once a reader trails, the blocks it has yet to read are.
func TestReadCacheTakesOnlyWhatAReaderTrails(t *testing.T) {
	rc, err := NewReadCache(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	l := mustOpen(t, vfs.NewMem(), "log", Options{TailCacheBytes: 16 << 10, ReadCache: rc})
	defer l.Close()
	const size = 100
	write := func(from, n int) {
		for i := from; i < from+n; i += 10 {
			if _, err := l.Append(context.Background(), entries(i, 10, size), AfterFlush); err != nil {
				t.Fatal(err)
			}
			readEach(t, l, uint64(i), uint64(i+10), func(i int) []byte { return payload(i, size) })
		}
	}
	write(0, 1000)
	// The first drop sees the reads since the log opened, the first of
	// which was of block 0: at most that block.
	if s := rc.Stats(); s.Offered > 1 {
		t.Fatalf("readers at the writer: %d blocks offered", s.Offered)
	}
	if st := l.Status(); st.TailCacheMisses != 0 {
		t.Fatalf("readers at the writer missed the tail %d times", st.TailCacheMisses)
	}
	readEach(t, l, 100, 101, func(i int) []byte { return payload(i, size) }) // a reader far behind
	write(1000, 1000)
	if s := rc.Stats(); s.Offered == 0 {
		t.Fatal("a reader trails, and no block was offered")
	}
}

// writeTrailed appends records from to to (10 at a time, payloads from
// want) with a reader that reads one record after each append from
// *trail on, so falling behind: the blocks leaving the tail go to the read
// cache.
func writeTrailed(t *testing.T, l *Log, from, to int, trail *uint64, want func(int) []byte) {
	t.Helper()
	for i := from; i < to; i += 10 {
		es := make([]Entry, 10)
		for k := range es {
			es[k] = Entry{Type: 1, Payload: want(i + k)}
		}
		if _, err := l.Append(context.Background(), es, AfterFlush); err != nil {
			t.Fatal(err)
		}
		readEach(t, l, *trail, *trail+1, want)
		*trail++
	}
}

// Logs sharing the read cache at the same offsets never see each other's
// records, nor does a later open of the same log see its earlier blocks
// (it reads its first record from the file).
func TestReadCacheKeepsLogsApart(t *testing.T) {
	rc, err := NewReadCache(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	const n = 1000
	fs := vfs.NewMem()
	mine := func(i int) []byte { return payload(i, 100) }
	other := func(i int) []byte { return bytes.Repeat([]byte{byte(i), 0xee}, 50) }
	opts := Options{TailCacheBytes: 8 << 10, ReadCache: rc}
	a, b := mustOpen(t, fs, "a", opts), mustOpen(t, fs, "b", opts)
	var ta, tb uint64
	for i := 0; i < n; i += 100 { // interleaved
		writeTrailed(t, a, i, i+100, &ta, mine)
		writeTrailed(t, b, i, i+100, &tb, other)
	}
	rc.wait()
	readEach(t, a, ta, n, mine)
	readEach(t, b, tb, n, other)
	if sa, sb := a.Status(), b.Status(); sa.ReadCacheHits < (n-ta)/2 || sb.ReadCacheHits < (n-tb)/2 {
		t.Fatalf("read cache hits %d and %d of %d and %d", sa.ReadCacheHits, sb.ReadCacheHits, n-ta, n-tb)
	}
	_ = a.Close()
	a = mustOpen(t, fs, "a", opts)
	defer a.Close()
	defer b.Close()
	readEach(t, a, ta, ta+1, mine)
	if h := a.Status().ReadCacheHits; h != 0 {
		t.Fatalf("a reopened log read a record from its earlier blocks (%d hits)", h)
	}
}

// A range declared lost is not served from the read cache afterwards,
// though its records were cached before; nor while the quarantine is
// still syncing its directory (the hole is listed from then on).
func TestReadCacheForgetsALostRange(t *testing.T) {
	rc, err := NewReadCache(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var armed atomic.Bool
	entered, release := make(chan struct{}), make(chan struct{})
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileSync && op.Path == "log" && armed.CompareAndSwap(true, false) {
			close(entered) // the quarantine's directory sync
			<-release
		}
		return nil
	}))
	l := mustOpen(t, fs, "log", Options{SegmentSize: 4 << 10, TailCacheBytes: 4 << 10, ReadCache: rc})
	defer l.Close()
	const n = 400
	var trail uint64
	writeTrailed(t, l, 0, n, &trail, func(i int) []byte { return payload(i, 100) })
	rc.wait()
	l.segMu.RLock()
	var victim uint64 // a sealed segment the reader has still to read
	for _, s := range l.segs[:len(l.segs)-1] {
		if s.base >= trail+64 {
			victim = s.base
			break
		}
	}
	l.segMu.RUnlock()
	if victim == 0 {
		t.Fatalf("no sealed segment past %d", trail+64)
	}
	if recs, err := l.ReadWritten(victim, 1); err != nil || len(recs) != 1 || l.Status().ReadCacheHits == 0 {
		t.Fatalf("read of %d before the quarantine: %d records, %v, %d read cache hits", victim, len(recs), err, l.Status().ReadCacheHits)
	}
	armed.Store(true)
	done := make(chan error)
	go func() {
		_, err := l.Quarantine(victim)
		done <- err
	}()
	<-entered
	var hole *HoleError
	if recs, err := l.ReadWritten(victim, 1); !errors.As(err, &hole) {
		t.Errorf("read of %d while it is quarantined: %d records, %v, want a hole", victim, len(recs), err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if recs, err := l.ReadWritten(victim, 1); !errors.As(err, &hole) {
		t.Fatalf("read of quarantined offset %d: %d records, %v, want a hole", victim, len(recs), err)
	}
}

// A reader going through a log that is not written, with or without a
// reader at its head, offers the read cache nothing: no block leaves a
// tail window, and blocks read from the files are never offered.
func TestReadCacheLoneReaderOffersNothing(t *testing.T) {
	for _, tail := range []int64{16 << 10, -1} {
		rc, err := NewReadCache(4 << 20)
		if err != nil {
			t.Fatal(err)
		}
		l := mustOpen(t, vfs.NewMem(), "log", Options{TailCacheBytes: tail, ReadCache: rc})
		const n = 20000
		for i := 0; i < n; i += 100 {
			if _, err := l.Append(testCtx(t), entries(i, 100, 100), AfterFlush); err != nil {
				t.Fatal(err)
			}
		}
		readEach(t, l, n-1, n, func(i int) []byte { return payload(i, 100) }) // a reader at the head
		for from := uint64(0); from < n-2000; {
			recs, err := l.ReadWritten(from, 8<<10)
			if err != nil {
				t.Fatal(err)
			}
			from += uint64(len(recs))
		}
		rc.wait()
		if s := rc.Stats(); s.Offered != 0 || s.Held != 0 {
			t.Fatalf("tail cache %d: %d blocks offered (%d bytes held)", tail, s.Offered, s.Held)
		}
		_ = l.Close()
		rc.Close()
	}
}

// Closing the read cache while logs still hand it blocks and read from it
// is safe: they read past it from then on.
func TestReadCacheCloseWhileInUse(t *testing.T) {
	for range 20 {
		rc, err := NewReadCache(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		var recs [tailBlockLen]Record
		recs[0] = Record{Type: 1, Payload: []byte("x")}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := uint64(0); ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					rc.offer(uint64(g), i, &recs)
					rc.takeOut(uint64(g), i/2)
					rc.block(uint64(g), i/3)
				}
			}()
		}
		rc.Close()
		if rc.block(0, 0) != nil {
			t.Fatal("a closed cache served a block")
		}
		close(stop)
		wg.Wait()
	}
}

// A quarantined segment whose records are still in the tail window: reads
// in the hole fail with a *HoleError (docs/decisions.md: "no read finds
// the hole listed and its records still served"), from the tail cache
// and, once the hole's blocks have left the window under a trailing
// reader, from the node's read cache.
func TestReadCacheHoleInTheTailWindowIsNotServed(t *testing.T) {
	rc, err := NewReadCache(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	l := mustOpen(t, vfs.NewMem(), "log", Options{SegmentSize: 16 << 10, TailCacheBytes: 64 << 10, ReadCache: rc})
	defer l.Close()
	const size = 100
	next := 0
	for ; next < 1000; next += 20 {
		if _, err := l.Append(context.Background(), entries(next, 20, size), AfterFlush); err != nil {
			t.Fatal(err)
		}
	}
	from, _ := l.CachedFrom()
	l.segMu.RLock()
	var victim, end uint64
	for i, s := range l.segs[:len(l.segs)-1] {
		if s.base >= from && (s.base+tailBlockLen-1)&^(tailBlockLen-1)+tailBlockLen <= l.segs[i+1].base {
			victim, end = s.base, l.segs[i+1].base
			break
		}
	}
	l.segMu.RUnlock()
	if end == 0 {
		t.Fatalf("no sealed segment holding a whole block in the tail window from %d", from)
	}
	hole, err := l.Quarantine(victim)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tail from %d; hole %d..%d; LostRecords %d", from, hole.From, hole.To, l.LostRecords())
	x := (victim + tailBlockLen - 1) &^ (tailBlockLen - 1) // a block wholly in the hole
	var he *HoleError
	recs, err := l.ReadWritten(x, 1)
	if !errors.As(err, &he) {
		t.Errorf("tail cache: read of %d in hole %d..%d: %d records, err %v, want a *HoleError", x, hole.From, hole.To, len(recs), err)
	}
	// Push the hole's blocks out of the tail window while that reader trails.
	before := l.Status().ReadCacheHits
	for ; next < 3000; next += 20 {
		if _, err := l.Append(context.Background(), entries(next, 20, size), AfterFlush); err != nil {
			t.Fatal(err)
		}
		_, _ = l.ReadWritten(x, 1)
	}
	rc.wait()
	if f, _ := l.CachedFrom(); f <= x {
		t.Fatalf("tail still holds %d (from %d)", x, f)
	}
	recs, err = l.ReadWritten(x, 1)
	hits := l.Status().ReadCacheHits - before
	if !errors.As(err, &he) {
		t.Errorf("read cache: read of %d in hole %d..%d: %d records (%q), err %v, read cache hits %d; want a *HoleError",
			x, hole.From, hole.To, len(recs), firstPayload(recs), err, hits)
	}
}

func firstPayload(recs []Record) string {
	if len(recs) == 0 {
		return ""
	}
	return string(recs[0].Payload[:13])
}

// A closed log takes its offered blocks out of the node's cache: no later
// open can read them (a new generation), so they would only hold the
// budget.
func TestReadCacheClosedLogTakesItsBlocksOut(t *testing.T) {
	rc, err := NewReadCache(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	l := mustOpen(t, vfs.NewMem(), "log", Options{TailCacheBytes: 16 << 10, ReadCache: rc})
	for i := 0; i < 2000; i += 50 {
		if _, err := l.Append(context.Background(), entries(i, 50, 100), AfterFlush); err != nil {
			t.Fatal(err)
		}
		_, _ = l.ReadWritten(0, 1) // a reader stuck at 0
	}
	rc.wait()
	held := rc.Stats().Held
	_ = l.Close()
	rc.wait()
	if after := rc.Stats().Held; after != 0 {
		t.Errorf("held %d bytes before the log closed, %d after: unreachable blocks keep the budget", held, after)
	}
}
