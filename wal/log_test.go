package wal

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestAppendReadReopen(t *testing.T) {
	for _, tc := range []struct {
		name string
		fs   func(t *testing.T) (vfs.FS, string)
		pre  Prealloc
	}{
		{"mem", func(t *testing.T) (vfs.FS, string) { return vfs.NewMem(), "log" }, PreallocDefault},
		{"disk-extend", func(t *testing.T) (vfs.FS, string) { return vfs.Default, t.TempDir() }, PreallocExtend},
		{"disk-keep-size", func(t *testing.T) (vfs.FS, string) { return vfs.Default, t.TempDir() }, PreallocKeepSize},
		{"disk-off", func(t *testing.T) (vfs.FS, string) { return vfs.Default, t.TempDir() }, PreallocOff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, dir := tc.fs(t)
			ctx := testCtx(t)
			opts := Options{SegmentSize: 64 << 10, IndexSpacing: 512, Preallocate: tc.pre}
			l := mustOpen(t, fs, dir, opts)
			const n = 2000
			for i := 0; i < n; i += 10 {
				d := AfterFlush
				if i%20 == 0 {
					d = AfterFsync
				}
				res, err := l.Append(ctx, entries(i, 10, 100), d)
				if err != nil {
					t.Fatalf("append %d: %v", i, err)
				}
				if res.First != uint64(i) || res.Next != uint64(i+10) {
					t.Fatalf("append %d got %+v", i, res)
				}
			}
			check := func(l *Log, durable bool) {
				t.Helper()
				recs := readAll(t, l, durable)
				if len(recs) != n {
					t.Fatalf("read %d records, want %d", len(recs), n)
				}
				for i, r := range recs {
					if r.Offset != uint64(i) || !bytes.Equal(r.Payload, payload(i, 100)) {
						t.Fatalf("record %d: offset %d payload %q", i, r.Offset, r.Payload)
					}
				}
			}
			check(l, false)
			if err := l.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			check(l, true)
			if st := l.Status(); st.Segments < 3 {
				t.Fatalf("expected rollovers, got %d segments", st.Segments)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Append(ctx, entries(0, 1, 10), AfterFlush); !errors.Is(err, ErrClosed) {
				t.Fatalf("append after close: %v", err)
			}
			l = mustOpen(t, fs, dir, opts)
			defer l.Close()
			if got := l.WrittenNext(); got != n {
				t.Fatalf("reopen written %d want %d", got, n)
			}
			if rep := l.Recovery(); rep.Stop != nil {
				t.Fatalf("clean reopen reported a stop: %v", rep.Stop)
			}
			check(l, true)
			res, err := l.Append(ctx, entries(n, 1, 100), AfterFsync)
			if err != nil || res.First != n {
				t.Fatalf("append after reopen: %+v %v", res, err)
			}
		})
	}
}
