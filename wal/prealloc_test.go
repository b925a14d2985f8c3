package wal

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestPreallocEnd(t *testing.T) {
	const seg = 16 << 20
	for _, tc := range []struct {
		name             string
		prealloc         Prealloc
		ahead            int64
		have, need, want int64
	}{
		{"new segment", PreallocExtend, 0, segmentHeaderSize, segmentHeaderSize, segmentHeaderSize + firstPreallocStep},
		{"new segment, big first record", PreallocExtend, 0, segmentHeaderSize, 1 << 20, 1 << 20},
		{"then the rest", PreallocExtend, 0, 256 << 10, 256<<10 + 1, seg},
		{"steps of ahead", PreallocExtend, 1 << 20, 256 << 10, 256<<10 + 1, 256<<10 + 1<<20},
		{"a step covers the record", PreallocExtend, 1 << 20, 256 << 10, 2 << 20, 2 << 20},
		{"whole segments", PreallocExtend, seg, segmentHeaderSize, segmentHeaderSize, seg},
		{"never past the segment", PreallocExtend, 4 << 20, 14 << 20, 14<<20 + 1, seg},
		{"keep size steps too", PreallocKeepSize, 0, segmentHeaderSize, segmentHeaderSize, segmentHeaderSize + firstPreallocStep},
		{"off", PreallocOff, 0, 1 << 20, 1<<20 + 100, 1<<20 + 100},
	} {
		o := Options{SegmentSize: seg, Preallocate: tc.prealloc, PreallocAhead: tc.ahead}
		if got := o.preallocEnd(tc.have, tc.need); got != tc.want {
			t.Errorf("%s: preallocEnd(%d, %d) = %d, want %d", tc.name, tc.have, tc.need, got, tc.want)
		}
	}
}

// segmentSizes lists the sizes of the log's segment files, oldest first.
func segmentSizes(t *testing.T, dir string) []int64 {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*"+segmentSuffix))
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int64
	for _, n := range names { // Glob sorts, and segment names sort by base
		info, err := os.Stat(n)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, info.Size())
	}
	return sizes
}

// An idle log reserves one small step of disk, not a segment; the writer
// reserves more as it reaches the end of what is reserved (the rest of
// the segment by default, or PreallocAhead at a time), and a log reopened
// over a short segment goes on from there, every record intact.
func TestPreallocGrowsInSteps(t *testing.T) {
	const segSize, size = 4 << 20, 4000
	for _, tc := range []struct {
		name  string
		ahead int64
	}{
		{"rest of the segment", 0},
		{"steps of 512 KiB", 512 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			dir := t.TempDir()
			opts := Options{SegmentSize: segSize, Preallocate: PreallocExtend, PreallocAhead: tc.ahead}
			l := mustOpen(t, vfs.Default, dir, opts)
			first := int64(segmentHeaderSize + firstPreallocStep)
			if got := segmentSizes(t, dir); len(got) != 1 || got[0] != first {
				t.Fatalf("an empty log's segment sizes %v, want [%d]", got, first)
			}
			// Write just past the first step.
			n := 0
			for segmentHeaderSize+int64(n)*int64(encodedSize(size)) <= first {
				if _, err := l.Append(ctx, entries(n, 1, size), AfterFlush); err != nil {
					t.Fatal(err)
				}
				n++
			}
			want := int64(segSize)
			if tc.ahead > 0 {
				want = first + tc.ahead
			}
			if got := segmentSizes(t, dir); len(got) != 1 || got[0] != want {
				t.Fatalf("segment sizes %v after %d records, want [%d]", got, n, want)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			// Reopened, the log keeps the file's reserved end and grows
			// from it, into a second segment.
			l = mustOpen(t, vfs.Default, dir, opts)
			defer l.Close()
			for l.Status().Segments < 2 {
				if _, err := l.Append(ctx, entries(n, 20, size), AfterFsync); err != nil {
					t.Fatal(err)
				}
				n += 20
			}
			got := segmentSizes(t, dir)
			if len(got) != 2 || got[0] > segSize || got[1] != first {
				t.Fatalf("segment sizes %v after %d records, want a full first and a fresh second of %d", got, n, first)
			}
			recs := readAll(t, l, true)
			if len(recs) != n {
				t.Fatalf("read %d records, want %d", len(recs), n)
			}
			for i, r := range recs {
				if string(r.Payload) != string(payload(i, size)) {
					t.Fatalf("record %d differs", i)
				}
			}
		})
	}
}
