package wal

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// Two readers behind the tail cache, reading one record at a time in
// offset order and interleaved, are served from read-ahead chunks: the
// segment file is read about once per chunk, not once per record, and
// every record is the one appended.
func TestReadAheadServesSequentialReaders(t *testing.T) {
	var reads atomic.Int64
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileReadAt {
			reads.Add(1)
		}
		return nil
	}))
	l := mustOpen(t, fs, "log", Options{TailCacheBytes: -1})
	defer l.Close()
	const n, size = 2000, 1000
	for i := 0; i < n; i += 100 {
		if _, err := l.Append(context.Background(), entries(i, 100, size), AfterFlush); err != nil {
			t.Fatal(err)
		}
	}
	reads.Store(0)
	check := func(off uint64) {
		t.Helper()
		recs, err := l.ReadWritten(off, 1)
		if err != nil || len(recs) != 1 || recs[0].Offset != off || !bytes.Equal(recs[0].Payload, payload(int(off), size)) {
			t.Fatalf("read %d: %d records, %v", off, len(recs), err)
		}
	}
	for i := range uint64(n / 2) {
		check(i)
		check(n/2 + i)
	}
	// 2000 KB in 64 KiB chunks is about 31 chunks, each needing a locate
	// and a read; one read per record would be 2000 and more.
	if got := reads.Load(); got > 150 {
		t.Fatalf("%d file reads for %d sequential records", got, n)
	}
}

// Records kept ahead are never served past the frontier of the read: a
// durable read after a written one stops at the durable end.
func TestReadAheadKeepsToTheFrontier(t *testing.T) {
	l := mustOpen(t, vfs.NewMem(), "log", Options{TailCacheBytes: -1, BackgroundSyncInterval: -1, SyncBytesThreshold: -1})
	defer l.Close()
	ctx := context.Background()
	if _, err := l.Append(ctx, entries(0, 100, 100), AfterFsync); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, entries(100, 100, 100), AfterFlush); err != nil {
		t.Fatal(err)
	}
	if l.DurableNext() != 100 || l.WrittenNext() != 200 {
		t.Fatalf("durable %d, written %d; want 100 and 200", l.DurableNext(), l.WrittenNext())
	}
	if recs, err := l.ReadWritten(50, 1); err != nil || len(recs) != 1 {
		t.Fatalf("read written 50: %d records, %v", len(recs), err)
	}
	recs, err := l.ReadDurable(51, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 49 || recs[0].Offset != 51 || recs[len(recs)-1].Offset != 99 {
		t.Fatalf("durable read from 51 returned %d records (%d to %d), want 51 to 99", len(recs), recs[0].Offset, recs[len(recs)-1].Offset)
	}
	recs, err = l.ReadWritten(51, 1<<20)
	if err != nil || len(recs) != 149 || recs[148].Offset != 199 {
		t.Fatalf("written read from 51: %d records, %v; want 149 up to 199", len(recs), err)
	}
}
