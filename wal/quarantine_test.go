package wal

import (
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A sealed segment whose header is corrupt is renamed aside, never deleted;
// its offsets read as a hole that callers can skip, before and after a
// reopen. (A damaged record costs only its own range: damage_test.go.)
func TestQuarantineCorruptSealedSegment(t *testing.T) {
	ctx := testCtx(t)
	fs := vfs.NewMem()
	opts := Options{SegmentSize: 4 << 10, TailCacheBytes: -1}
	l := mustOpen(t, fs, "log", opts)
	const n = 200
	for i := 0; i < n; i += 5 {
		if _, err := l.Append(ctx, entries(i, 5, 100), AfterFsync); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Flip a byte of the second segment's magic.
	names, err := fs.List("log")
	if err != nil {
		t.Fatal(err)
	}
	var bases []uint64
	for _, name := range names {
		if b, ok := parseSegmentName(name); ok {
			bases = append(bases, b)
		}
	}
	slices.Sort(bases)
	if len(bases) < 4 {
		t.Fatalf("want at least 4 segments, have %d", len(bases))
	}
	victim, next := bases[1], bases[2]
	f, err := fs.OpenReadWrite(fs.PathJoin("log", segmentName(victim)), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	one := make([]byte, 1)
	if _, err := f.ReadAt(one, 3); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	one[0] ^= 0xff
	if _, err := f.WriteAt(one, 3); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	l = mustOpen(t, fs, "log", opts)
	good, err := l.ReadDurable(victim, 1<<20)
	if err == nil {
		_, err = l.ReadDurable(victim+uint64(len(good)), 1<<20)
	}
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.Segment != victim {
		t.Fatalf("read of the damaged segment: %v", err)
	}
	if _, err := l.Quarantine(bases[len(bases)-1]); err == nil {
		t.Fatal("quarantining the active segment must fail")
	}
	hole, err := l.Quarantine(ce.Segment)
	if err != nil {
		t.Fatal(err)
	}
	if hole.From != victim || hole.To != next {
		t.Fatalf("hole %+v, want [%d, %d)", hole, victim, next)
	}
	check := func(l *Log) {
		t.Helper()
		var he *HoleError
		if _, err := l.ReadDurable(victim+1, 1<<20); !errors.As(err, &he) || !errors.Is(err, ErrQuarantined) || he.Hole.To != next {
			t.Fatalf("read inside the hole: %v", err)
		}
		recs, err := l.ReadDurable(0, 1<<20)
		if err != nil || uint64(len(recs)) != victim {
			t.Fatalf("read before the hole: %d records, %v", len(recs), err)
		}
		for from := next; from < n; {
			recs, err := l.ReadDurable(from, 1<<20)
			if err != nil || len(recs) == 0 {
				t.Fatalf("read after the hole at %d: %d records, %v", from, len(recs), err)
			}
			for _, r := range recs {
				if string(r.Payload) != string(payload(int(r.Offset), 100)) {
					t.Fatalf("record %d differs", r.Offset)
				}
			}
			from = recs[len(recs)-1].Offset + 1
		}
		if _, err := fs.Stat(hole.Path); err != nil {
			t.Fatalf("quarantined file: %v", err)
		}
	}
	check(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, fs, "log", opts)
	defer l.Close()
	if q := l.Recovery().Quarantined; len(q) != 1 || q[0].From != victim || q[0].To != next {
		t.Fatalf("reopen found holes %+v", q)
	}
	check(l)
}
