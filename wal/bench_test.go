package wal

import (
	"context"
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
