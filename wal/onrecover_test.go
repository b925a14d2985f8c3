package wal

import (
	"bytes"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// OnRecover sees exactly the records recovery keeps in the active segment,
// in order, with their payloads, and none of a torn tail.
func TestOnRecoverVisitsKeptActiveRecords(t *testing.T) {
	ctx := testCtx(t)
	fs := vfs.NewMem()
	opts := Options{SegmentSize: 16 << 10}
	l := mustOpen(t, fs, "log", opts)
	const n = 500
	for i := 0; i < n; i += 5 {
		if _, err := l.Append(ctx, entries(i, 5, 100), AfterFsync); err != nil {
			t.Fatal(err)
		}
	}
	active := l.Recovery().ActiveSegment
	st := l.Status()
	if st.Segments < 3 {
		t.Fatalf("want rollovers, got %d segments", st.Segments)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// A torn record after the last good one: a header promising more bytes
	// than follow.
	names, _ := fs.List("log")
	var last uint64
	for _, name := range names {
		if b, ok := parseSegmentName(name); ok && b > last {
			last = b
		}
	}
	f, err := fs.OpenReadWrite(fs.PathJoin("log", segmentName(last)), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := f.Stat()
	torn := appendRecord(nil, n, 1, bytes.Repeat([]byte{7}, 100))[:60]
	if _, err := f.WriteAt(torn, info.Size()); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	var seen []Record
	opts.OnRecover = func(r Record) {
		seen = append(seen, Record{Offset: r.Offset, Type: r.Type, Payload: bytes.Clone(r.Payload)})
	}
	l = mustOpen(t, fs, "log", opts)
	defer l.Close()
	if l.Recovery().Stop == nil {
		t.Fatal("the torn record was not found")
	}
	base := l.Recovery().ActiveSegment
	if base != last || active > base {
		t.Fatalf("active segment %d, files end at %d", base, last)
	}
	if uint64(len(seen)) != n-base {
		t.Fatalf("visited %d records, want %d (from %d to %d)", len(seen), n-base, base, n)
	}
	for i, r := range seen {
		if r.Offset != base+uint64(i) || !bytes.Equal(r.Payload, payload(int(r.Offset), 100)) {
			t.Fatalf("visit %d: offset %d payload %q", i, r.Offset, r.Payload)
		}
	}
}
