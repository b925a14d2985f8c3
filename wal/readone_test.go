package wal

import (
	"runtime"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A consumer reading one record at a time (budget 1, as the broker's
// dispatcher does) is handed and counted that record only, and allocates
// little per record: a chunk read from the file serves the records after
// it (read-ahead) instead of being read again for each.
func TestReadOneRecordReadsLittle(t *testing.T) {
	ctx := testCtx(t)
	l := mustOpen(t, vfs.NewMem(), "log", Options{TailCacheBytes: -1})
	defer l.Close()
	const n, size = 1000, 100
	if _, err := l.Append(ctx, entries(0, n, size), AfterFsync); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for o := uint64(0); o < n; o++ {
		recs, err := l.ReadDurable(o, 1)
		if err != nil || len(recs) != 1 || recs[0].Offset != o || string(recs[0].Payload) != string(payload(int(o), size)) {
			t.Fatalf("read of %d with budget 1: %d records, %v", o, len(recs), err)
		}
	}
	runtime.ReadMemStats(&after)
	if misses := l.Status().TailCacheMisses; misses != n {
		t.Fatalf("%d records read from the file counted as %d misses", n, misses)
	}
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 16<<10 {
		t.Fatalf("a one-record read allocated %d bytes", per)
	}
}
