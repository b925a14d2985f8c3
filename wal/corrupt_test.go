package wal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Tests of what Open and reads make of damaged segment files: a torn or
// corrupt active segment is cut at its first bad record, a damaged sealed
// segment fails the reads in its range with a positioned *CorruptionError.

// discardLogger keeps the expected recovery warnings out of the test output.
func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// segmentBases lists the base offsets of the segment files in dir, sorted.
func segmentBases(t testing.TB, fs vfs.FS, dir string) []uint64 {
	t.Helper()
	names, err := fs.List(dir)
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	var bases []uint64
	for _, name := range names {
		if base, ok := parseSegmentName(name); ok {
			bases = append(bases, base)
		}
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	return bases
}

func segmentPath(fs vfs.FS, dir string, base uint64) string {
	return fs.PathJoin(dir, segmentName(base))
}

func readWholeFile(t testing.TB, fs vfs.FS, path string) []byte {
	t.Helper()
	f, err := fs.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return b
}

// rewriteFile replaces the file's contents with b (shorter or longer), as a
// damaged disk or a power cut could leave it.
func rewriteFile(t testing.TB, fs vfs.FS, path string, b []byte) {
	t.Helper()
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatalf("create %s: %v", path, err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("sync %s: %v", path, err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close %s: %v", path, err)
	}
}

// recordSpan is where one record sits in a segment file.
type recordSpan struct {
	offset uint64
	pos    int64 // byte position of the record header
	size   int64 // header and payload
}

// segmentSpans decodes the records of a segment file's bytes.
func segmentSpans(t testing.TB, data []byte, base uint64) []recordSpan {
	t.Helper()
	if err := checkSegmentHeader(data, base); err != nil {
		t.Fatalf("segment %d: %v", base, err)
	}
	var spans []recordSpan
	pos, off := int64(segmentHeaderSize), base
	for {
		_, used, status, reason := decodeRecord(data[pos:], off, maxPayload)
		switch status {
		case decodeOK:
			spans = append(spans, recordSpan{offset: off, pos: pos, size: int64(used)})
			pos += int64(used)
			off++
			continue
		case decodeEnd:
			return spans
		}
		t.Fatalf("segment %d at %d: %s", base, pos, reason)
	}
}

// corruptSize gives record i of a test log its payload size: varied, so a
// resurrected record could not hide behind a regular layout.
func corruptSize(i uint64) int { return 20 + int(i*37%150) }

// corruptPayload is record i's payload in generation gen: the records
// appended after a recovery differ from the ones they replace.
func corruptPayload(gen int, i uint64) []byte {
	p := []byte(fmt.Sprintf("gen%d-rec%08d-", gen, i))
	for len(p) < corruptSize(i) {
		p = append(p, byte('a'+(int(i)+gen)%26))
	}
	return p[:corruptSize(i)]
}

// genEntry is record i of generation gen.
func genEntry(gen int, i uint64) Entry {
	return Entry{Type: byte(1 + i%200), Payload: corruptPayload(gen, i)}
}

// appendGeneration appends records from..to-1 of generation gen one at a
// time and checks the offsets they took.
func appendGeneration(t *testing.T, l *Log, gen int, from, to uint64) {
	t.Helper()
	ctx := testCtx(t)
	for i := from; i < to; i++ {
		res, err := l.Append(ctx, []Entry{genEntry(gen, i)}, AfterFlush)
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		if res.First != i {
			t.Fatalf("append %d took offset %d", i, res.First)
		}
	}
}

// checkGenerations reads the whole log and checks that records below split
// are generation 0 and the rest generation 1.
func checkGenerations(t *testing.T, l *Log, split, end uint64) {
	t.Helper()
	recs := readAll(t, l, false)
	if uint64(len(recs)) != end {
		t.Fatalf("read %d records, want %d", len(recs), end)
	}
	for _, r := range recs {
		gen := 0
		if r.Offset >= split {
			gen = 1
		}
		if want := genEntry(gen, r.Offset); !bytes.Equal(r.Payload, want.Payload) || r.Type != want.Type {
			t.Fatalf("record %d: type %d payload %q, want generation %d %q", r.Offset, r.Type, r.Payload, gen, want.Payload)
		}
	}
}

// writeSegmentedLog fills a log with records of generation 0 until it has
// five segments, then twelve more so the active segment holds several, and
// closes it. It returns the number of records.
func writeSegmentedLog(t *testing.T, fs vfs.FS, dir string, opts Options) uint64 {
	t.Helper()
	l := mustOpen(t, fs, dir, opts)
	n := uint64(0)
	for l.Status().Segments < 5 {
		appendGeneration(t, l, 0, n, n+1)
		n++
	}
	appendGeneration(t, l, 0, n, n+12)
	n += 12
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	return n
}

func flipByte(b []byte, at int64) []byte {
	b[at] ^= 0x5a
	return b
}

// TestRecoverDamagedActiveSegment tears the tail of the active segment of a
// closed log in one way per case and reopens it. Recovery must stop at the
// torn record with a CorruptionError naming it (or end cleanly for the zeros
// a power cut leaves), keep everything before it, cut everything after it,
// count nothing as lost, and leave a log that takes appends and reopens
// cleanly. (Damage with valid records after it is damage_test.go's.) The records appended
// after the recovery have the sizes of the ones they replace, so a stale
// record after the bad one that survived the cut would sit exactly where the
// next record belongs, with a valid checksum, and come back on the reopen.
func TestRecoverDamagedActiveSegment(t *testing.T) {
	type damage struct {
		name string
		// corrupt returns the damaged segment bytes and the index of the
		// record in spans where recovery must stop (len(spans) when all of
		// them survive).
		corrupt func(data []byte, spans []recordSpan) ([]byte, int)
		// reason is part of the expected CorruptionError's reason; empty
		// when recovery must end cleanly.
		reason string
	}
	damages := []damage{
		{
			name: "torn last record",
			corrupt: func(data []byte, spans []recordSpan) ([]byte, int) {
				return data[:len(data)-5], len(spans) - 1
			},
			reason: "torn record",
		},
		{
			name: "partial last record, zeros after",
			corrupt: func(data []byte, spans []recordSpan) ([]byte, int) {
				s := spans[len(spans)-1]
				clear(data[s.pos+s.size/2:])
				return append(data, make([]byte, 6<<10)...), len(spans) - 1
			},
			reason: "checksum mismatch",
		},
		{
			name: "zero-length segment",
			corrupt: func(data []byte, spans []recordSpan) ([]byte, int) {
				return nil, 0
			},
		},
		{
			name: "zero-filled tail",
			corrupt: func(data []byte, spans []recordSpan) ([]byte, int) {
				return append(data, make([]byte, 6<<10)...), len(spans)
			},
		},
	}
	envs := []struct {
		name string
		fs   func(t *testing.T) (vfs.FS, string)
		pre  Prealloc
	}{
		{"mem", func(t *testing.T) (vfs.FS, string) { return vfs.NewMem(), "log" }, PreallocDefault},
		{"disk-keep-size", func(t *testing.T) (vfs.FS, string) { return vfs.Default, t.TempDir() }, PreallocKeepSize},
		{"disk-off", func(t *testing.T) (vfs.FS, string) { return vfs.Default, t.TempDir() }, PreallocOff},
	}
	for _, env := range envs {
		for _, dm := range damages {
			t.Run(env.name+"/"+dm.name, func(t *testing.T) {
				fs, dir := env.fs(t)
				opts := Options{SegmentSize: 4 << 10, IndexSpacing: 256, Preallocate: env.pre, TailCacheBytes: -1,
					BackgroundSyncInterval: -1, Logger: discardLogger()}
				n := writeSegmentedLog(t, fs, dir, opts)

				bases := segmentBases(t, fs, dir)
				base := bases[len(bases)-1]
				path := segmentPath(fs, dir, base)
				data := readWholeFile(t, fs, path)
				spans := segmentSpans(t, data, base)
				if len(spans) < 8 || spans[len(spans)-1].offset != n-1 {
					t.Fatalf("active segment %d holds %d records ending at %d, want at least 8 ending at %d",
						base, len(spans), spans[len(spans)-1].offset, n-1)
				}
				if end := spans[len(spans)-1].pos + spans[len(spans)-1].size; int64(len(data)) != end {
					t.Fatalf("active segment is %d bytes, records end at %d: the size must be the data end", len(data), end)
				}
				damaged, stopAt := dm.corrupt(bytes.Clone(data), spans)
				rewriteFile(t, fs, path, damaged)

				// What recovery must find: records up to stopAt survive.
				keep := base + uint64(stopAt)
				wantPos := int64(segmentHeaderSize)
				if stopAt < len(spans) {
					wantPos = spans[stopAt].pos
				} else if stopAt > 0 {
					wantPos = spans[stopAt-1].pos + spans[stopAt-1].size
				}

				l := mustOpen(t, fs, dir, opts)
				rep := l.Recovery()
				if dm.reason == "" {
					if rep.Stop != nil {
						t.Fatalf("recovery stopped at %v, want a clean end", rep.Stop)
					}
				} else {
					var ce *CorruptionError
					if rep.Stop == nil || !errors.As(error(rep.Stop), &ce) || !errors.Is(rep.Stop, ErrCorrupt) {
						t.Fatalf("recovery stop %v, want a corruption error", rep.Stop)
					}
					if ce.Segment != base || ce.Pos != wantPos || ce.Offset != keep || !strings.Contains(ce.Reason, dm.reason) {
						t.Fatalf("recovery stop %+v, want segment %d pos %d offset %d reason %q",
							*ce, base, wantPos, keep, dm.reason)
					}
				}
				if rep.ActiveSegment != base || rep.ScannedBytes != wantPos || rep.End != keep {
					t.Fatalf("recovery report %+v, want active %d scanned %d end %d", rep, base, wantPos, keep)
				}
				if want := max(int64(len(damaged))-wantPos, 0); rep.CutBytes != want {
					t.Fatalf("recovery cut %d bytes, want %d", rep.CutBytes, want)
				}
				if len(rep.Damaged) != 0 || rep.LostRecords != 0 || l.LostRecords() != 0 {
					t.Fatalf("a torn tail counted as damage: %v, %d lost (log says %d)", rep.Damaged, rep.LostRecords, l.LostRecords())
				}
				if rep.RewroteHeader != (len(damaged) == 0) {
					t.Fatalf("recovery rewrote the header: %v", rep.RewroteHeader)
				}
				if got := l.WrittenNext(); got != keep {
					t.Fatalf("WrittenNext %d after recovery, want %d", got, keep)
				}
				if got := l.DurableNext(); got != keep {
					t.Fatalf("DurableNext %d after recovery, want %d", got, keep)
				}
				checkGenerations(t, l, keep, keep)

				// Replace what was cut with records of the same sizes, then
				// reopen: exactly those come back, and nothing older.
				const more = 3
				if stopAt+1 < len(spans) && stopAt+more >= len(spans) {
					t.Fatalf("no stale record past the %d appended ones that could come back", more)
				}
				appendGeneration(t, l, 1, keep, keep+more)
				checkGenerations(t, l, keep, keep+more)
				if err := l.Close(); err != nil {
					t.Fatalf("close: %v", err)
				}
				l = mustOpen(t, fs, dir, opts)
				defer l.Close()
				if rep := l.Recovery(); rep.Stop != nil {
					t.Fatalf("second reopen stopped at %v, want a clean end", rep.Stop)
				}
				if got := l.WrittenNext(); got != keep+more {
					t.Fatalf("second reopen WrittenNext %d, want %d: stale records came back", got, keep+more)
				}
				checkGenerations(t, l, keep, keep+more)
			})
		}
	}
}

// TestCorruptSealedRecord damages a record inside a sealed segment. Open does
// not scan sealed segments, so it succeeds; the read that meets the damage
// has the segment checked, the bad record becomes a one-record hole copied
// aside, and every other record, before and after it, reads back exactly. The damage is done
// both to a closed log (the reopened log finds it when it first indexes the
// segment) and under an open log whose index is complete (the checksum check
// of the read itself finds it).
func TestCorruptSealedRecord(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reopen bool
	}{
		{"reopened", true},
		{"open log", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, dir := vfs.NewMem(), "log"
			opts := Options{SegmentSize: 4 << 10, IndexSpacing: 256, TailCacheBytes: -1,
				BackgroundSyncInterval: -1, Logger: discardLogger()}
			n := writeSegmentedLog(t, fs, dir, opts)
			l := mustOpen(t, fs, dir, opts)
			defer func() { l.Close() }()

			bases := segmentBases(t, fs, dir)
			base := bases[1]
			path := segmentPath(fs, dir, base)
			spans := segmentSpans(t, readWholeFile(t, fs, path), base)
			bad := spans[len(spans)/2]
			if !tc.reopen {
				// Index the segment before the damage: its last record.
				if _, err := l.ReadDurable(spans[len(spans)-1].offset, 0); err != nil {
					t.Fatal(err)
				}
			}
			// Flip a payload byte in place, through a second handle.
			f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
			if err != nil {
				t.Fatal(err)
			}
			at := bad.pos + recordHeaderSize + 3
			b := make([]byte, 1)
			if _, err := f.ReadAt(b, at); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte{b[0] ^ 0xff}, at); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if tc.reopen {
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				l = mustOpen(t, fs, dir, opts)
				if rep := l.Recovery(); rep.Stop != nil || len(rep.Corrupt) != 0 || rep.End != n {
					t.Fatalf("recovery %+v, want a clean end at %d", rep, n)
				}
			}

			wantHole := func(err error, what string) {
				t.Helper()
				var he *HoleError
				if !errors.Is(err, ErrQuarantined) || !errors.As(err, &he) {
					t.Fatalf("%s: got %v, want a hole", what, err)
				}
				if he.Hole.From != bad.offset || he.Hole.To != bad.offset+1 {
					t.Fatalf("%s: got hole %+v, want [%d, %d)", what, he.Hole, bad.offset, bad.offset+1)
				}
			}
			// The bad record first, so the reopened log builds the index of
			// the segment on that read; the open log checks the segment
			// when its read meets the damage.
			recs, err := l.ReadDurable(bad.offset, 1<<20)
			wantHole(err, "read at the bad record")
			if len(recs) != 0 {
				t.Fatalf("read at the bad record returned %d records", len(recs))
			}
			if got := l.LostRecords(); got != 1 {
				t.Fatalf("LostRecords %d, want 1", got)
			}
			holes := l.Holes()
			if len(holes) != 1 {
				t.Fatalf("holes %+v, want one", holes)
			}
			if kept := readWholeFile(t, fs, holes[0].Path); int64(len(kept)) != bad.size {
				t.Fatalf("the damaged range's copy holds %d bytes, want the record's %d", len(kept), bad.size)
			}
			// Every other record reads back exactly, one at a time and in
			// runs that stop before the hole.
			for o := uint64(0); o < n; o++ {
				if o == bad.offset {
					continue
				}
				recs, err := l.ReadDurable(o, 0)
				if err != nil || len(recs) != 1 || recs[0].Offset != o || !bytes.Equal(recs[0].Payload, corruptPayload(0, o)) {
					t.Fatalf("read at %d: %d records, %v", o, len(recs), err)
				}
			}
			recs, err = l.ReadDurable(base, 1<<20)
			if err != nil || uint64(len(recs)) != bad.offset-base {
				t.Fatalf("read from %d: %d records, %v; want the %d before the bad one", base, len(recs), err, bad.offset-base)
			}
			_, err = l.ReadDurable(base+uint64(len(recs)), 1<<20)
			wantHole(err, "read at the bad record after the good ones")
			checkReadsAround(t, l, n, map[uint64]bool{bad.offset: true}, func(o uint64) []byte { return corruptPayload(0, o) })

			// Reopened, the hole is known before any read.
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = mustOpen(t, fs, dir, opts)
			if rep := l.Recovery(); rep.LostRecords != 1 || len(rep.Damaged) != 0 || rep.End != n {
				t.Fatalf("reopen: recovery %+v, want 1 record lost and a clean end at %d", rep, n)
			}
			checkReadsAround(t, l, n, map[uint64]bool{bad.offset: true}, func(o uint64) []byte { return corruptPayload(0, o) })
		})
	}
}

// checkReadsAround reads the log from its head to n, stepping over holes,
// and checks that exactly the offsets in lost are holes and every other
// record carries want(offset).
func checkReadsAround(t *testing.T, l *Log, n uint64, lost map[uint64]bool, want func(uint64) []byte) {
	t.Helper()
	for o := l.Head(); o < n; {
		recs, err := l.ReadDurable(o, 1<<20)
		var he *HoleError
		if errors.As(err, &he) {
			for h := he.Hole.From; h < he.Hole.To; h++ {
				if !lost[h] {
					t.Fatalf("offset %d is in hole %+v but was not damaged", h, he.Hole)
				}
			}
			o = he.Hole.To
			continue
		}
		if err != nil || len(recs) == 0 {
			t.Fatalf("read at %d: %d records, %v", o, len(recs), err)
		}
		for _, r := range recs {
			if r.Offset != o || lost[o] || !bytes.Equal(r.Payload, want(o)) {
				t.Fatalf("read at %d gave record %d %q (lost: %v)", o, r.Offset, r.Payload, lost[o])
			}
			o++
		}
	}
}

// TestCorruptSealedHeader damages the header of a sealed segment: Open
// succeeds and lists it in Recovery().Corrupt, reads in its range fail with
// its CorruptionError, and the other segments read as usual.
func TestCorruptSealedHeader(t *testing.T) {
	fs, dir := vfs.NewMem(), "log"
	opts := Options{SegmentSize: 4 << 10, IndexSpacing: 256, BackgroundSyncInterval: -1, Logger: discardLogger()}
	n := writeSegmentedLog(t, fs, dir, opts)
	bases := segmentBases(t, fs, dir)
	base, next := bases[1], bases[2]
	path := segmentPath(fs, dir, base)
	rewriteFile(t, fs, path, flipByte(readWholeFile(t, fs, path), 3)) // in the magic

	l := mustOpen(t, fs, dir, opts)
	defer l.Close()
	rep := l.Recovery()
	if rep.Stop != nil || rep.End != n || rep.Segments != len(bases) {
		t.Fatalf("recovery %+v, want a clean end at %d with %d segments", rep, n, len(bases))
	}
	if len(rep.Corrupt) != 1 || rep.Corrupt[0].Segment != base || rep.Corrupt[0].Pos != 0 {
		t.Fatalf("recovery lists corrupt segments %v, want only segment %d", rep.Corrupt, base)
	}
	for _, o := range []uint64{base, base + 1, next - 1} {
		_, err := l.ReadDurable(o, 1<<20)
		var ce *CorruptionError
		if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) || ce.Segment != base {
			t.Fatalf("read at %d in the damaged segment: %v, want its corruption error", o, err)
		}
	}
	for _, o := range []uint64{0, base - 1, next, n - 1} {
		recs, err := l.ReadDurable(o, 0)
		if err != nil || len(recs) != 1 || recs[0].Offset != o || !bytes.Equal(recs[0].Payload, corruptPayload(0, o)) {
			t.Fatalf("read at %d outside the damaged segment: %d records, %v", o, len(recs), err)
		}
	}
}

// TestRecoverRecordAcrossScanChunk places a record header across the
// boundary of the chunks a scan reads, with only zero bytes of it before the
// boundary (the low bytes of its length). Those zeros must not read as the
// clean end of the records: recovery of the active segment, and the lazy
// index of the segment once it is sealed, must find every record after it.
func TestRecoverRecordAcrossScanChunk(t *testing.T) {
	for _, tc := range []struct {
		name  string
		zeros int // bytes of the straddling header before the boundary, all zero
		size  int // its payload size, whose low bytes are those zeros
	}{
		{"1 zero byte", 1, 256},
		{"2 zero bytes", 2, 64 << 10},
		{"4 zero bytes", 4, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, dir := vfs.Default, t.TempDir()
			ctx := testCtx(t)
			opts := Options{SegmentSize: 4<<20 + 128<<10, TailCacheBytes: -1, BackgroundSyncInterval: -1, Logger: discardLogger()}
			l := mustOpen(t, fs, dir, opts)
			// The first scan chunk starts after the segment header: the
			// first record fills it up to the straddling header's zeros.
			want := []Record{
				{Offset: 0, Type: 1, Payload: bytes.Repeat([]byte("a"), scanChunk-tc.zeros-recordHeaderSize)},
				{Offset: 1, Type: 2, Payload: bytes.Repeat([]byte("b"), tc.size)},
				{Offset: 2, Type: 3, Payload: []byte("after the boundary")},
			}
			for _, r := range want {
				if _, err := l.Append(ctx, []Entry{{Type: r.Type, Payload: r.Payload}}, AfterFlush); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = mustOpen(t, fs, dir, opts)
			if rep := l.Recovery(); rep.Stop != nil || rep.End != 3 {
				t.Fatalf("recovery %+v, want a clean end at 3", rep)
			}
			checkRecords(t, "records after recovery", readAll(t, l, true), want)

			// Seal the segment with a record that does not fit, and reopen
			// so the sealed segment is indexed by a lazy scan.
			big := Record{Offset: 3, Type: 4, Payload: bytes.Repeat([]byte("c"), 160<<10)}
			want = append(want, big)
			if _, err := l.Append(ctx, []Entry{{Type: big.Type, Payload: big.Payload}}, AfterFsync); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = mustOpen(t, fs, dir, opts)
			defer l.Close()
			if rep := l.Recovery(); rep.Segments != 2 || rep.End != 4 {
				t.Fatalf("recovery %+v, want 2 segments ending at 4", rep)
			}
			recs, err := l.ReadDurable(2, 0)
			if err != nil {
				t.Fatalf("read past the boundary in the sealed segment: %v", err)
			}
			checkRecords(t, "record past the boundary", recs, want[2:3])
			checkRecords(t, "records after sealing", readAll(t, l, true), want)
		})
	}
}
