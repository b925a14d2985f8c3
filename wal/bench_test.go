package wal

import (
	"context"
	"fmt"
	"runtime"
	"testing"
)

// Go benchmarks of the append and read paths on the real disk (t.TempDir).
// The full matrix against the disk's floor is `fibril log bench`.

func benchmarkAppend(b *testing.B, d Boundary, batch int) {
	l := mustOpen(b, nil, b.TempDir(), Options{})
	defer l.Close()
	es := entries(0, batch, 128)
	ctx := context.Background()
	b.SetBytes(int64(batch * 128))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := l.Append(ctx, es, d); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendAfterFlush1(b *testing.B)  { benchmarkAppend(b, AfterFlush, 1) }
func BenchmarkAppendAfterFlush16(b *testing.B) { benchmarkAppend(b, AfterFlush, 16) }
func BenchmarkAppendAfterFsync1(b *testing.B)  { benchmarkAppend(b, AfterFsync, 1) }

func BenchmarkAppendAfterFlushParallel(b *testing.B) {
	l := mustOpen(b, nil, b.TempDir(), Options{})
	defer l.Close()
	ctx := context.Background()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		es := entries(0, 1, 128)
		for pb.Next() {
			if _, err := l.Append(ctx, es, AfterFlush); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func benchmarkRead(b *testing.B, cacheBytes int64) {
	dir := b.TempDir()
	l := mustOpen(b, nil, dir, Options{TailCacheBytes: cacheBytes})
	defer l.Close()
	ctx := context.Background()
	const n = 4096
	for i := 0; i < n; i += 64 {
		if _, err := l.Append(ctx, entries(i, 64, 128), AfterFlush); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		recs, err := l.ReadWritten(uint64(i*64%n), 64*128)
		if err != nil || len(recs) == 0 {
			b.Fatalf("read: %d records, %v", len(recs), err)
		}
	}
}

func BenchmarkReadWrittenCached(b *testing.B)   { benchmarkRead(b, 0) }
func BenchmarkReadWrittenUncached(b *testing.B) { benchmarkRead(b, -1) }

// BenchmarkReadOneUncachedSequential reads one record at a time in offset
// order with no tail cache: a consumer that trails the writer past the
// tail cache, as a partition's dispatcher reads.
func BenchmarkReadOneUncachedSequential(b *testing.B) {
	l := mustOpen(b, nil, b.TempDir(), Options{TailCacheBytes: -1})
	defer l.Close()
	ctx := context.Background()
	const n = 16384
	for i := 0; i < n; i += 64 {
		if _, err := l.Append(ctx, entries(i, 64, 1024), AfterFlush); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(1024)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		off := uint64(i % n)
		recs, err := l.ReadWritten(off, 1)
		if err != nil || len(recs) != 1 || recs[0].Offset != off {
			b.Fatalf("read %d: %d records, %v", off, len(recs), err)
		}
	}
}

// BenchmarkTrailingReaders: 1,000 logs, each written one 1 KiB record at a
// time, round robin, each with a reader: on the first `trailing` logs it
// trails its writer by lag records, on the others it reads the record just
// written (a broker with many queues, some of whose consumers lag). One op
// is one append and one read. Three set-ups: a 1 MiB tail window per log and no
// read cache (the broker before the read cache), a 128 KiB window and no
// read cache, and a 128 KiB window with a 32 MiB read cache shared by all.
// Reported besides time: the share of the reads past the tail window the
// read cache served (hit-ratio), the reads that went to a segment file
// (file-reads/op), and the live heap after the run (heap-MiB).
func BenchmarkTrailingReaders(b *testing.B) {
	for _, tr := range []struct{ trailing, lag int }{{1000, 256}, {50, 512}} {
		for _, c := range []struct {
			name         string
			tail, budget int64
		}{{"tail=1MiB", 1 << 20, 0}, {"tail=128KiB", 128 << 10, 0}, {"tail=128KiB+cache=32MiB", 128 << 10, 32 << 20}} {
			b.Run(fmt.Sprintf("trailing=%d/lag=%d/%s", tr.trailing, tr.lag, c.name), func(b *testing.B) {
				benchmarkTrailing(b, 1000, tr.trailing, tr.lag, c.tail, c.budget)
			})
		}
	}
}

// benchReadCache is a read cache of budget bytes closed with b, or nil
// (none) for a budget of 0.
func benchReadCache(b *testing.B, budget int64) *ReadCache {
	if budget == 0 {
		return nil
	}
	rc, err := NewReadCache(budget)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rc.Close)
	return rc
}

func benchmarkTrailing(b *testing.B, logs, trailing, lag int, tail, budget int64) {
	rc := benchReadCache(b, budget)
	dir := b.TempDir()
	ls := make([]*Log, logs)
	for i := range ls {
		ls[i] = mustOpen(b, nil, fmt.Sprintf("%s/%d", dir, i), Options{
			SegmentSize: 4 << 20, TailCacheBytes: tail, ReadCache: rc, BackgroundSyncInterval: -1, SyncBytesThreshold: -1})
	}
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ctx := context.Background()
	step := func(i int) {
		l := ls[i%logs]
		n := i / logs // records this log holds before this append
		if _, err := l.Append(ctx, entries(n, 1, 1024), AfterFlush); err != nil {
			b.Fatal(err)
		}
		behind := 0 // the record just written
		if i%logs < trailing {
			behind = lag
		}
		if n >= behind {
			off := uint64(n - behind)
			if recs, err := l.ReadWritten(off, 1); err != nil || len(recs) != 1 || recs[0].Offset != off {
				b.Fatalf("read %d: %d records, %v", off, len(recs), err)
			}
		}
	}
	// Every reader trailing, and reading blocks dropped from the tail
	// while it trailed; the caches filled.
	warm := logs * (2*lag + 128)
	for i := range warm {
		step(i)
	}
	before := make([]Status, logs)
	for i, l := range ls {
		before[i] = l.Status()
	}
	b.SetBytes(1024)
	b.ResetTimer()
	for i := range b.N {
		step(warm + i)
	}
	b.StopTimer()
	var hits, misses uint64
	for i, l := range ls {
		st := l.Status()
		hits += st.ReadCacheHits - before[i].ReadCacheHits
		misses += st.TailCacheMisses - before[i].TailCacheMisses
	}
	if misses > 0 {
		b.ReportMetric(float64(hits)/float64(misses), "hit-ratio")
	}
	b.ReportMetric(float64(misses-hits)/float64(b.N), "file-reads/op")
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MiB")
}

// BenchmarkCatchUp: a follower catching up 100k records of 1 KiB (100 MB)
// from a log with the broker's 1 MiB tail window, in 64 KiB reads, while
// the writer goes on (one record per read) and a consumer reads each new
// record as it is written; with the read cache off and at 32 MiB. One op
// is one whole catch-up; reported per record caught up, with the share
// of its reads the read cache served.
func BenchmarkCatchUp(b *testing.B) {
	for _, budget := range []int64{0, 32 << 20} {
		b.Run(fmt.Sprintf("records=100k/cache=%dMiB", budget>>20), func(b *testing.B) {
			rc := benchReadCache(b, budget)
			const n, size = 100_000, 1024
			l := mustOpen(b, nil, b.TempDir(), Options{TailCacheBytes: 1 << 20, ReadCache: rc, BackgroundSyncInterval: -1, SyncBytesThreshold: -1})
			defer l.Close()
			ctx := context.Background()
			for i := 0; i < n; i += 100 {
				if _, err := l.Append(ctx, entries(i, 100, size), AfterFlush); err != nil {
					b.Fatal(err)
				}
			}
			before := l.Status()
			caught := 0
			b.ResetTimer()
			for range b.N {
				for o, end := uint64(0), l.written.load(); o < end; {
					recs, err := l.ReadWritten(o, 64<<10)
					if err != nil || len(recs) == 0 || recs[0].Offset != o {
						b.Fatalf("catch-up read at %d: %d records, %v", o, len(recs), err)
					}
					o += uint64(len(recs))
					caught += len(recs)
					res, err := l.Append(ctx, entries(0, 1, size), AfterFlush)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := l.ReadWritten(res.First, size); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			st := l.Status()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(caught), "ns/record")
			if m := st.TailCacheMisses - before.TailCacheMisses; m > 0 {
				b.ReportMetric(float64(st.ReadCacheHits-before.ReadCacheHits)/float64(m), "hit-ratio")
			}
		})
	}
}
