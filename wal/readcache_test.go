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

// Logs sharing the read cache at the same offsets never see each other's
// records, nor does a later open of the same log see its earlier blocks
// (it reads its first record from the file). Blocks one reader reads from
// a segment file while another is behind it serve that other reader.
func TestReadCacheKeepsLogsApart(t *testing.T) {
	rc, err := NewReadCache(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	const n = 500
	fs := vfs.NewMem()
	other := func(i int) []byte { return bytes.Repeat([]byte{byte(i), 0xee}, 40) }
	a := mustOpen(t, fs, "a", Options{TailCacheBytes: -1, ReadCache: rc})
	b := mustOpen(t, fs, "b", Options{TailCacheBytes: -1, ReadCache: rc})
	var eb []Entry
	for i := range n {
		eb = append(eb, Entry{Type: 1, Payload: other(i)})
	}
	if _, err := a.Append(context.Background(), entries(0, n, 100), AfterFlush); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Append(context.Background(), eb, AfterFlush); err != nil {
		t.Fatal(err)
	}
	// On each log, a reader at 100 and another, more than a block behind
	// it, at 0; then the first reads on.
	for _, l := range []*Log{a, b} {
		want := other
		if l == a {
			want = func(i int) []byte { return payload(i, 100) }
		}
		readEach(t, l, 100, 101, want)
		readEach(t, l, 0, 1, want)
	}
	a.ahead.reset() // as when other readers have taken the read-ahead slots
	b.ahead.reset()
	for round := range 2 {
		readEach(t, a, 101, n, func(i int) []byte { return payload(i, 100) })
		readEach(t, b, 101, n, other)
		rc.wait()
		a.ahead.reset()
		b.ahead.reset()
		if round == 1 {
			if sa, sb := a.Status(), b.Status(); sa.ReadCacheHits < (n-100)/2 || sb.ReadCacheHits < (n-100)/2 {
				t.Fatalf("second round: read cache hits %d and %d of %d", sa.ReadCacheHits, sb.ReadCacheHits, n)
			}
		}
	}
	_ = a.Close()
	a = mustOpen(t, fs, "a", Options{TailCacheBytes: -1, ReadCache: rc})
	defer a.Close()
	defer b.Close()
	readEach(t, a, 0, 1, func(i int) []byte { return payload(i, 100) })
	if h := a.Status().ReadCacheHits; h != 0 {
		t.Fatalf("a reopened log read its first record from its earlier blocks (%d hits)", h)
	}
}

// A range declared lost is not served from the read cache afterwards,
// though its records were read, and cached, before.
func TestReadCacheForgetsALostRange(t *testing.T) {
	rc, err := NewReadCache(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	l := mustOpen(t, vfs.NewMem(), "log", Options{SegmentSize: 4 << 10, TailCacheBytes: -1, ReadCache: rc})
	defer l.Close()
	const n = 200
	for i := 0; i < n; i += 5 {
		if _, err := l.Append(testCtx(t), entries(i, 5, 100), AfterFsync); err != nil {
			t.Fatal(err)
		}
	}
	// One record at a time, each read's offers admitted before the next:
	// a block offered again before ristretto has admitted its first offer
	// would be turned away (a cache may drop; this test counts).
	readEach(t, l, 100, 101, func(i int) []byte { return payload(i, 100) })
	readEach(t, l, 0, 1, func(i int) []byte { return payload(i, 100) }) // a reader behind
	l.ahead.reset()
	for range 2 {
		for o := uint64(101); o < n; o++ {
			readEach(t, l, o, o+1, func(i int) []byte { return payload(i, 100) })
			rc.wait()
		}
		l.ahead.reset() // as when other readers have taken the read-ahead slots
	}
	if h := l.Status().ReadCacheHits; h < (n-100)/2 {
		t.Fatalf("%d read cache hits of %d on the second read", h, n-100)
	}
	l.segMu.RLock()
	var victim uint64 // a sealed segment among the records read twice
	for _, s := range l.segs[:len(l.segs)-1] {
		if s.base >= 100 {
			victim = s.base
			break
		}
	}
	l.segMu.RUnlock()
	if victim == 0 {
		t.Fatal("no sealed segment past offset 100")
	}
	if recs, err := l.ReadWritten(victim, 1); err != nil || len(recs) != 1 || l.Status().ReadCacheHits == 0 {
		t.Fatalf("read of %d before the quarantine: %d records, %v", victim, len(recs), err)
	}
	if _, err := l.Quarantine(victim); err != nil {
		t.Fatal(err)
	}
	var hole *HoleError
	if _, err := l.ReadWritten(victim, 1); !errors.As(err, &hole) {
		t.Fatalf("read of a quarantined offset: %v, want a hole", err)
	}
}

// A read from a segment file under way when its segment is quarantined
// offers what it read under the generation from before: the quarantined
// records are not served from the read cache afterwards.
func TestReadCacheQuarantineDuringARead(t *testing.T) {
	rc, err := NewReadCache(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var armed atomic.Bool
	entered, release := make(chan struct{}), make(chan struct{})
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileReadAt && armed.CompareAndSwap(true, false) {
			close(entered)
			<-release
		}
		return nil
	}))
	l := mustOpen(t, fs, "log", Options{SegmentSize: 4 << 10, TailCacheBytes: 4 << 10, ReadCache: rc})
	defer l.Close()
	const n = 400
	for i := 0; i < n; i += 5 {
		if _, err := l.Append(testCtx(t), entries(i, 5, 100), AfterFsync); err != nil {
			t.Fatal(err)
		}
	}
	l.segMu.RLock()
	var victim uint64 // a sealed segment past 100
	for _, s := range l.segs[:len(l.segs)-1] {
		if s.base >= 100 {
			victim = s.base
			break
		}
	}
	l.segMu.RUnlock()
	// A reader ahead and one behind, so that what is read is shared.
	readEach(t, l, 300, 301, func(i int) []byte { return payload(i, 100) })
	readEach(t, l, 0, 1, func(i int) []byte { return payload(i, 100) })
	armed.Store(true)
	done := make(chan error)
	go func() {
		_, err := l.ReadWritten(victim, 1)
		done <- err
	}()
	<-entered
	if _, err := l.Quarantine(victim); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rc.wait()
	if s := rc.Stats(); s.Offered == 0 {
		t.Fatal("the read under way offered nothing: the test does not test")
	}
	l.ahead.reset() // what the read-ahead holds is another matter
	var hole *HoleError
	if recs, err := l.ReadWritten(victim, 1); !errors.As(err, &hole) {
		t.Fatalf("read of quarantined offset %d: %d records, %v, want a hole (read cache hits %d)", victim, len(recs), err, l.Status().ReadCacheHits)
	}
}

// A lone reader going through a log, idle or being written, offers the
// read cache nothing of what it reads from the segment files: nobody is
// behind it to read it again.
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
		for from := uint64(0); from < n-2000; {
			recs, err := l.ReadWritten(from, 8<<10)
			if err != nil {
				t.Fatal(err)
			}
			from += uint64(len(recs))
		}
		rc.wait()
		if s := rc.Stats(); s.Offered != 0 || s.Held != 0 {
			t.Fatalf("tail cache %d: a lone reader offered %d blocks (%d bytes held)", tail, s.Offered, s.Held)
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
		var recs [tailBlockLen][]byte
		recs[0] = []byte("x")
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
