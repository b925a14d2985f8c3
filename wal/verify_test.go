package wal

import (
	"fmt"
	"hash/crc32"
	"sort"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestVerify(t *testing.T) {
	opts := Options{SegmentSize: 4 << 10, IndexSpacing: 256, TailCacheBytes: -1,
		BackgroundSyncInterval: -1, Logger: discardLogger()}
	for _, tc := range []struct {
		name string
		// damage changes the log; it gets the bases of its segments.
		damage  func(t *testing.T, fs vfs.FS, dir string, bases []uint64)
		corrupt string // part of the single corruption's reason; "" for none
		torn    bool   // the last segment ends in a torn tail
		lost    bool   // fewer records than written are valid
	}{
		{name: "clean", damage: func(*testing.T, vfs.FS, string, []uint64) {}},
		{
			name: "torn tail",
			damage: func(t *testing.T, fs vfs.FS, dir string, bases []uint64) {
				path := segmentPath(fs, dir, bases[len(bases)-1])
				data := readWholeFile(t, fs, path)
				spans := segmentSpans(t, data, bases[len(bases)-1])
				last := spans[len(spans)-1]
				rewriteFile(t, fs, path, data[:last.pos+last.size-5])
			},
			torn: true, lost: true,
		},
		{
			name: "flipped byte in the active segment",
			damage: func(t *testing.T, fs vfs.FS, dir string, bases []uint64) {
				path := segmentPath(fs, dir, bases[len(bases)-1])
				data := readWholeFile(t, fs, path)
				spans := segmentSpans(t, data, bases[len(bases)-1])
				rewriteFile(t, fs, path, flipByte(data, spans[1].pos+recordHeaderSize+2))
			},
			corrupt: "checksum mismatch", lost: true,
		},
		{
			name: "flipped byte in a sealed segment",
			damage: func(t *testing.T, fs vfs.FS, dir string, bases []uint64) {
				path := segmentPath(fs, dir, bases[1])
				data := readWholeFile(t, fs, path)
				spans := segmentSpans(t, data, bases[1])
				rewriteFile(t, fs, path, flipByte(data, spans[len(spans)/2].pos+recordHeaderSize+2))
			},
			corrupt: "checksum mismatch", lost: true,
		},
		{
			name: "bad sealed header",
			damage: func(t *testing.T, fs vfs.FS, dir string, bases []uint64) {
				path := segmentPath(fs, dir, bases[2])
				rewriteFile(t, fs, path, flipByte(readWholeFile(t, fs, path), 0))
			},
			corrupt: "bad segment magic", lost: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, dir := vfs.NewMem(), "log"
			n := writeSegmentedLog(t, fs, dir, opts)
			bases := segmentBases(t, fs, dir)
			tc.damage(t, fs, dir, bases)
			before := snapshotFiles(t, fs, dir)

			var visited uint64
			var progress int64
			rep, err := Verify(fs, dir, VerifyOptions{
				Visit:    func(Record) { visited++ },
				Progress: func(scanned, total int64) { progress = scanned },
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Segments) != len(bases) || progress != rep.Bytes || visited != rep.Records {
				t.Fatalf("segments %d (want %d), progress %d of %d, visited %d of %d",
					len(rep.Segments), len(bases), progress, rep.Bytes, visited, rep.Records)
			}
			if lost := rep.Records < n; lost != tc.lost || rep.Records > n {
				t.Errorf("records %d of %d written; want lost=%v", rep.Records, n, tc.lost)
			}
			if (rep.TornTail() != nil) != tc.torn {
				t.Errorf("torn tail %v, want %v", rep.TornTail(), tc.torn)
			}
			switch {
			case tc.corrupt == "" && len(rep.Corrupt) != 0:
				t.Errorf("corrupt %v, want none", rep.Corrupt)
			case tc.corrupt != "" && (len(rep.Corrupt) != 1 || !strings.Contains(rep.Corrupt[0].Reason, tc.corrupt)):
				t.Errorf("corrupt %v, want one with %q", rep.Corrupt, tc.corrupt)
			}
			if after := snapshotFiles(t, fs, dir); after != before {
				t.Errorf("verify changed the log:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

func TestVerifyRange(t *testing.T) {
	opts := Options{SegmentSize: 4 << 10, IndexSpacing: 256, TailCacheBytes: -1,
		BackgroundSyncInterval: -1, Logger: discardLogger()}
	fs, dir := vfs.NewMem(), "log"
	writeSegmentedLog(t, fs, dir, opts)
	bases := segmentBases(t, fs, dir)
	from, to := bases[2]+1, bases[2]+3
	var got []uint64
	rep, err := Verify(fs, dir, VerifyOptions{From: from, To: to, Visit: func(r Record) { got = append(got, r.Offset) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0] != bases[2] || got[2] != to-1 || len(rep.Corrupt) != 0 {
		t.Fatalf("visited %v, corrupt %v; want %d..%d", got, rep.Corrupt, bases[2], to-1)
	}
}

// snapshotFiles describes every file in dir by name and contents.
func snapshotFiles(t *testing.T, fs vfs.FS, dir string) string {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		data := readWholeFile(t, fs, fs.PathJoin(dir, name))
		fmt.Fprintf(&b, "%s:%08x ", name, crc32.ChecksumIEEE(data))
	}
	return b.String()
}
