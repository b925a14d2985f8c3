package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Tests of damage with valid records after it: one bad record, or a small
// damaged range, costs exactly the records in it, in the active segment and
// in a sealed one; the records around it read back exactly, and the loss
// is counted.

// damageCase damages one segment's bytes.
type damageCase struct {
	name string
	// corrupt damages data in place and returns the indexes in spans of
	// the records it touched.
	corrupt func(data []byte, spans []recordSpan) []int
	// tornAt, when not -1, is the span where the active segment's
	// recovery must cut instead: a torn tail, nothing counted as lost.
	tornAt func(spans []recordSpan) int
}

func flipBit(data []byte, at int64, bit uint) { data[at] ^= 1 << bit }

func notTorn([]recordSpan) int { return -1 }

// damageCases are a dozen ways to damage records in a segment of at least
// 30 records, each one corruption function.
var damageCases = []damageCase{
	{"first record's length", func(d []byte, s []recordSpan) []int { flipBit(d, s[0].pos, 2); return []int{0} }, notTorn},
	{"first record's checksum", func(d []byte, s []recordSpan) []int { flipBit(d, s[0].pos+5, 7); return []int{0} }, notTorn},
	{"offset field", func(d []byte, s []recordSpan) []int { flipBit(d, s[7].pos+8, 0); return []int{7} }, notTorn},
	{"type byte", func(d []byte, s []recordSpan) []int { flipBit(d, s[9].pos+16, 4); return []int{9} }, notTorn},
	{"payload", func(d []byte, s []recordSpan) []int {
		flipBit(d, s[12].pos+recordHeaderSize+s[12].size/3, 1)
		return []int{12}
	}, notTorn},
	{"length past the limit", func(d []byte, s []recordSpan) []int { flipBit(d, s[14].pos+3, 6); return []int{14} }, notTorn},
	{"last payload byte", func(d []byte, s []recordSpan) []int {
		flipBit(d, s[16].pos+s[16].size-1, 3)
		return []int{16}
	}, notTorn},
	{"two adjacent records", func(d []byte, s []recordSpan) []int {
		flipBit(d, s[18].pos+recordHeaderSize+2, 0)
		flipBit(d, s[19].pos+recordHeaderSize+2, 0)
		return []int{18, 19}
	}, notTorn},
	{"two records apart", func(d []byte, s []recordSpan) []int {
		flipBit(d, s[20].pos+4, 0)
		flipBit(d, s[25].pos+recordHeaderSize, 5)
		return []int{20, 25}
	}, notTorn},
	{"range across a boundary", func(d []byte, s []recordSpan) []int {
		end := s[22].pos + s[22].size
		copy(d[end-20:end+20], bytes.Repeat([]byte{0xa5}, 40))
		return []int{22, 23}
	}, notTorn},
	{"whole record garbled", func(d []byte, s []recordSpan) []int {
		copy(d[s[27].pos:s[27].pos+s[27].size], bytes.Repeat([]byte{0xff}, int(s[27].size)))
		return []int{27}
	}, notTorn},
	{"a record quoted in a damaged payload", func(d []byte, s []recordSpan) []int {
		// Record 24's payload quotes a valid record of a far offset; the
		// damage to 24 must not let the quote swallow the records after.
		sp := s[24]
		quote := appendRecord(nil, sp.offset+1000, 1, []byte("quoted"))
		body := append(quote, bytes.Repeat([]byte{'q'}, int(sp.size)-recordHeaderSize-len(quote))...)
		copy(d[sp.pos:], appendRecord(nil, sp.offset, d[sp.pos+16], body))
		flipBit(d, sp.pos+4, 1)
		return []int{24}
	}, notTorn},
	{"last record", func(d []byte, s []recordSpan) []int {
		last := len(s) - 1
		flipBit(d, s[last].pos+recordHeaderSize+1, 2)
		return []int{last}
	}, func(s []recordSpan) int { return len(s) - 1 }}, // nothing valid after it
	{"torn write before later records", func(d []byte, s []recordSpan) []int {
		// A write that never reached the disk: a zeroed range holding an
		// aligned sector, with records written later intact after it.
		from := s[10].pos + recordHeaderSize + 5
		clear(d[from : from+2*sectorSize])
		var touched []int
		for i, sp := range s {
			if sp.pos < from+2*sectorSize && sp.pos+sp.size > from {
				touched = append(touched, i)
			}
		}
		return touched
	}, func([]recordSpan) int { return 10 }},
}

// damageOpts are the options of the damage tests' logs.
func damageOpts() Options {
	return Options{SegmentSize: 8 << 10, IndexSpacing: 512, TailCacheBytes: -1,
		BackgroundSyncInterval: -1, Logger: discardLogger()}
}

// writeDamageLog fills a log with records of generation 0 until it has
// three segments, then 40 more in the active segment, and closes it. It
// returns the number of records.
func writeDamageLog(t *testing.T, fs vfs.FS, dir string) uint64 {
	t.Helper()
	l := mustOpen(t, fs, dir, damageOpts())
	n := uint64(0)
	for l.Status().Segments < 3 {
		appendGeneration(t, l, 0, n, n+1)
		n++
	}
	appendGeneration(t, l, 0, n, n+40)
	n += 40
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	return n
}

// damageSegment applies dc to the segment at base and returns the offsets
// of the records it touched and the damaged bytes.
func damageSegment(t *testing.T, fs vfs.FS, dir string, base uint64, dc damageCase) (map[uint64]bool, []recordSpan, []byte) {
	t.Helper()
	path := segmentPath(fs, dir, base)
	data := readWholeFile(t, fs, path)
	spans := segmentSpans(t, data, base)
	if len(spans) < 30 {
		t.Fatalf("segment %d holds %d records, want at least 30", base, len(spans))
	}
	damaged := bytes.Clone(data)
	lost := map[uint64]bool{}
	for _, i := range dc.corrupt(damaged, spans) {
		lost[spans[i].offset] = true
	}
	rewriteFile(t, fs, path, bytes.Clone(damaged)) // the memory FS may scribble on what it wrote
	return lost, spans, damaged
}

// checkDamageKept checks that every damaged range is copied aside byte for
// byte and that together they lost exactly the offsets in lost.
func checkDamageKept(t *testing.T, fs vfs.FS, dir string, damage []Damage, damaged []byte, lost map[uint64]bool) {
	t.Helper()
	n := 0
	for _, d := range damage {
		kept := readWholeFile(t, fs, fs.PathJoin(dir, damagedName(d)))
		if !bytes.Equal(kept, damaged[d.Pos:d.End]) {
			t.Fatalf("copy of %v differs from the damaged bytes", d)
		}
		for o := d.From; o < d.To; o++ {
			if !lost[o] {
				t.Fatalf("damage %v took offset %d, which was not damaged", d, o)
			}
			n++
		}
	}
	if n != len(lost) {
		t.Fatalf("damage %v lost %d records, want %d", damage, n, len(lost))
	}
}

func TestDamagedActiveSegment(t *testing.T) {
	for _, dc := range damageCases {
		t.Run(dc.name, func(t *testing.T) {
			fs, dir := vfs.NewMem(), "log"
			n := writeDamageLog(t, fs, dir)
			bases := segmentBases(t, fs, dir)
			base := bases[len(bases)-1]
			lost, spans, damaged := damageSegment(t, fs, dir, base, dc)
			end := n
			if torn := dc.tornAt(spans); torn >= 0 {
				lost, end = map[uint64]bool{}, spans[torn].offset
			}

			l := mustOpen(t, fs, dir, damageOpts())
			rep := l.Recovery()
			if (rep.Stop != nil) != (end < n) || rep.End != end || l.WrittenNext() != end {
				t.Fatalf("recovery stop %v end %d, want end %d", rep.Stop, rep.End, end)
			}
			if rep.LostRecords != uint64(len(lost)) || l.LostRecords() != uint64(len(lost)) {
				t.Fatalf("recovery counts %d lost, the log %d, want %d", rep.LostRecords, l.LostRecords(), len(lost))
			}
			checkDamageKept(t, fs, dir, rep.Damaged, damaged, lost)
			payload := func(o uint64) []byte { return corruptPayload(0, o) }
			checkReadsAround(t, l, end, lost, payload)

			// Appends go on after the records kept, and a reopen finds the
			// same damage again.
			appendGeneration(t, l, 1, end, end+3)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = mustOpen(t, fs, dir, damageOpts())
			defer l.Close()
			if again := l.Recovery(); again.Stop != nil || again.End != end+3 || again.LostRecords != uint64(len(lost)) {
				t.Fatalf("reopen: stop %v end %d lost %d, want a clean end at %d with %d lost",
					again.Stop, again.End, again.LostRecords, end+3, len(lost))
			}
			checkReadsAround(t, l, end+3, lost, func(o uint64) []byte {
				if o >= end {
					return corruptPayload(1, o)
				}
				return payload(o)
			})
		})
	}
}

func TestDamagedSealedSegment(t *testing.T) {
	for _, found := range []string{"by a read", "by the scrub"} {
		for _, dc := range damageCases {
			t.Run(found+"/"+dc.name, func(t *testing.T) {
				fs, dir := vfs.NewMem(), "log"
				n := writeDamageLog(t, fs, dir)
				bases := segmentBases(t, fs, dir)
				lost, _, damaged := damageSegment(t, fs, dir, bases[1], dc)

				opts := damageOpts()
				scrubbed := make(chan ScrubReport, 1)
				if found == "by the scrub" {
					opts.ScrubBytesPerSecond = 1 << 40
					opts.OnScrub = func(r ScrubReport) { scrubbed <- r }
				}
				l := mustOpen(t, fs, dir, opts)
				if rep := l.Recovery(); rep.Stop != nil || rep.End != n || rep.LostRecords != 0 {
					t.Fatalf("recovery %+v, want a clean end at %d: sealed segments are not scanned at open", rep, n)
				}
				if found == "by the scrub" {
					rep := <-scrubbed
					if rep.Err != nil || rep.Segments != len(bases)-1 {
						t.Fatalf("scrub %+v, want %d segments scanned", rep, len(bases)-1)
					}
					checkDamageKept(t, fs, dir, rep.Damaged, damaged, lost)
					if got := l.LostRecords(); got != uint64(len(lost)) {
						t.Fatalf("after the scrub LostRecords %d, want %d", got, len(lost))
					}
				}
				payload := func(o uint64) []byte { return corruptPayload(0, o) }
				checkReadsAround(t, l, n, lost, payload)
				if got := l.LostRecords(); got != uint64(len(lost)) {
					t.Fatalf("LostRecords %d, want %d", got, len(lost))
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				// Reopened, the holes are known before any read.
				l = mustOpen(t, fs, dir, damageOpts())
				defer l.Close()
				if rep := l.Recovery(); rep.LostRecords != uint64(len(lost)) {
					t.Fatalf("reopen counts %d lost, want %d", rep.LostRecords, len(lost))
				}
				checkReadsAround(t, l, n, lost, payload)
			})
		}
	}
}

// A scrub stops when the log closes, however slow its rate, and reports
// why.
func TestScrubStopsAtClose(t *testing.T) {
	fs, dir := vfs.NewMem(), "log"
	writeDamageLog(t, fs, dir)
	opts := damageOpts()
	opts.ScrubBytesPerSecond = 1 // a second per byte: it cannot finish
	scrubbed := make(chan ScrubReport, 1)
	opts.OnScrub = func(r ScrubReport) { scrubbed <- r }
	l := mustOpen(t, fs, dir, opts)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case rep := <-scrubbed:
		if !errors.Is(rep.Err, errScrubStopped) || rep.Segments != 0 {
			t.Fatalf("scrub %+v, want it stopped by the close", rep)
		}
	default:
		t.Fatal("Close returned before the scrub stopped")
	}
}

// A torn write whose zero run is shorter than a sector: the sector holding
// a record's first bytes kept its old content (the records before it, then
// zeros) and the next sector, holding the rest of that record and later
// ones, was written. Nothing but a torn write zeroes a record's bytes
// exactly up to a sector boundary, so recovery cuts there; it must not
// call the record damage and serve the unsynced records after it.
func TestTornWriteShorterThanASector(t *testing.T) {
	fs, dir := vfs.NewMem(), "log"
	opts := damageOpts()
	l := mustOpen(t, fs, dir, opts)
	// Record 0 ends 3 bytes before the first sector boundary, so record 1's
	// length starts there.
	first := Entry{Type: 1, Payload: bytes.Repeat([]byte{'a'}, sectorSize-3-segmentHeaderSize-recordHeaderSize)}
	es := []Entry{first}
	for range 5 {
		es = append(es, Entry{Type: 1, Payload: bytes.Repeat([]byte{'b'}, 100)})
	}
	if _, err := l.Append(testCtx(t), es, AfterFsync); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	path := segmentPath(fs, dir, 0)
	data := readWholeFile(t, fs, path)
	if got := binary.LittleEndian.Uint64(data[sectorSize-3+8:]); got != 1 {
		t.Fatalf("record 1 is not at %d (offset field %d)", sectorSize-3, got)
	}
	clear(data[sectorSize-3 : sectorSize])
	rewriteFile(t, fs, path, data)

	l = mustOpen(t, fs, dir, opts)
	defer l.Close()
	rep := l.Recovery()
	if rep.Stop == nil || rep.End != 1 || len(rep.Damaged) != 0 || rep.LostRecords != 0 {
		t.Fatalf("recovery: stop %v end %d damaged %v lost %d; want a torn tail at offset 1", rep.Stop, rep.End, rep.Damaged, rep.LostRecords)
	}
}
