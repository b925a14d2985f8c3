package wal

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Fuzz targets for the decoders of bytes read back from disk. `make fuzz`
// runs them by name.

// fuzzMaxRecord is the record size limit the fuzz targets decode with: small,
// so that lengths just past it are within the fuzzer's reach.
const fuzzMaxRecord = 256

// fuzzRecords encodes records n..n+count-1 with small varied payloads.
func fuzzRecords(buf []byte, first uint64, count int) []byte {
	for i := range count {
		o := first + uint64(i)
		buf = appendRecord(buf, o, byte(1+o%7), payload(int(o), int(o%40)))
	}
	return buf
}

// FuzzDecodeRecord decodes arbitrary bytes as a record. It must never panic,
// and a record it accepts must be exactly what appendRecord makes of the
// decoded fields: nothing in the consumed bytes goes unchecked.
func FuzzDecodeRecord(f *testing.F) {
	valid := fuzzRecords(nil, 7, 1)
	f.Add(valid, uint64(7))
	f.Add(valid, uint64(8))                                // wrong offset
	f.Add(fuzzRecords(nil, 0, 3), uint64(0))               // followed by more records
	f.Add(valid[:len(valid)-1], uint64(7))                 // torn payload
	f.Add(valid[:recordHeaderSize-1], uint64(7))           // torn header
	f.Add(make([]byte, recordHeaderSize+5), uint64(0))     // zeros
	f.Add([]byte{}, uint64(0))                             // nothing
	f.Add(appendRecord(nil, 1, 0, []byte("x")), uint64(1)) // type 0
	f.Add(appendRecord(nil, 1<<40, 255, make([]byte, fuzzMaxRecord)), uint64(1<<40))
	f.Add(appendRecord(nil, 2, 9, make([]byte, fuzzMaxRecord+1)), uint64(2))
	f.Fuzz(func(t *testing.T, b []byte, want uint64) {
		rec, used, status, reason := decodeRecord(b, want, fuzzMaxRecord)
		switch status {
		case decodeOK:
			if used < recordHeaderSize || used > len(b) || used != recordHeaderSize+len(rec.Payload) {
				t.Fatalf("decoded %d bytes of %d with a %d-byte payload", used, len(b), len(rec.Payload))
			}
			if rec.Offset != want || rec.Type == 0 || len(rec.Payload) > fuzzMaxRecord {
				t.Fatalf("accepted offset %d (want %d), type %d, %d-byte payload", rec.Offset, want, rec.Type, len(rec.Payload))
			}
			if again := appendRecord(nil, rec.Offset, rec.Type, rec.Payload); !bytes.Equal(again, b[:used]) {
				t.Fatalf("re-encoding gives %x, decoded %x", again, b[:used])
			}
		case decodeEnd:
			if used != 0 || !allZero(b[:min(len(b), recordHeaderSize)]) {
				t.Fatalf("end of records at a non-zero header %x (used %d)", b[:min(len(b), recordHeaderSize)], used)
			}
		case decodeShort, decodeBad:
			if used != 0 || reason == "" {
				t.Fatalf("status %d used %d reason %q", status, used, reason)
			}
		default:
			t.Fatalf("unknown status %d", status)
		}
	})
}

// FuzzRecoverSegment opens a log whose only segment has a valid header
// followed by arbitrary bytes. Open must not panic or fail. It must keep
// the records a plain decode of the bytes accepts up to its first stop;
// zeros there end the records cleanly, anything else is a torn tail or a
// damaged range, and every record kept after a damaged range must be one
// the bytes hold whole, with the offsets in between read as holes and
// counted as lost. The log must take an append and reopen to the same
// records.
func FuzzRecoverSegment(f *testing.F) {
	recs := fuzzRecords(nil, 0, 5)
	f.Add(recs)
	f.Add([]byte{})
	f.Add(recs[:len(recs)-3])                                              // torn tail
	f.Add(append(bytes.Clone(recs), make([]byte, 100)...))                 // zero-filled tail
	f.Add(append(bytes.Clone(recs), fuzzRecords(nil, 9, 2)...))            // a record from elsewhere
	f.Add(append(append(bytes.Clone(recs), make([]byte, 17)...), recs...)) // records after zeros
	damaged := bytes.Clone(recs)
	damaged[40] ^= 1
	f.Add(damaged)
	opts := Options{SegmentSize: 64 << 10, IndexSpacing: 64, MaxRecordSize: fuzzMaxRecord,
		BackgroundSyncInterval: -1, TailCacheBytes: -1, Logger: discardLogger()}
	f.Fuzz(func(t *testing.T, body []byte) {
		// What a plain decode of the body accepts.
		var want []Record
		pos, stop := 0, decodeOK
		for {
			rec, used, status, _ := decodeRecord(body[pos:], uint64(len(want)), fuzzMaxRecord)
			if status != decodeOK {
				stop = status
				break
			}
			want = append(want, rec)
			pos += used
		}

		fs, dir := vfs.NewMem(), "log"
		if err := fs.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		rewriteFile(t, fs, segmentPath(fs, dir, 0), append(encodeSegmentHeader(0), body...))
		l := mustOpen(t, fs, dir, opts)
		rep := l.Recovery()
		switch {
		case stop == decodeEnd && (rep.Stop != nil || len(rep.Damaged) > 0):
			t.Fatalf("recovery stop %v, damage %v where zeros end the records", rep.Stop, rep.Damaged)
		case stop != decodeEnd && rep.Stop == nil && len(rep.Damaged) == 0:
			t.Fatalf("recovery ended cleanly at a record with status %d", stop)
		case len(rep.Damaged) == 0 && (rep.End != uint64(len(want)) || rep.ScannedBytes != int64(segmentHeaderSize+pos)):
			t.Fatalf("recovery %+v: want %d records in %d bytes", rep, len(want), segmentHeaderSize+pos)
		case len(rep.Damaged) > 0 && rep.Damaged[0].Pos != int64(segmentHeaderSize+pos):
			t.Fatalf("first damage %v, want it at the first bad record, byte %d", rep.Damaged[0], segmentHeaderSize+pos)
		case l.WrittenNext() != rep.End:
			t.Fatalf("WrittenNext %d, recovery end %d", l.WrittenNext(), rep.End)
		}
		got, lost := readAround(t, l)
		if lost != rep.LostRecords || lost != l.LostRecords() || uint64(len(got))+lost != rep.End {
			t.Fatalf("read %d records and %d lost of %d; recovery counts %d lost, the log %d",
				len(got), lost, rep.End, rep.LostRecords, l.LostRecords())
		}
		for i, r := range got {
			if i < len(want) {
				if r.Offset != uint64(i) || r.Type != want[i].Type || !bytes.Equal(r.Payload, want[i].Payload) {
					t.Fatalf("record %d read as offset %d type %d %q, want type %d %q",
						i, r.Offset, r.Type, r.Payload, want[i].Type, want[i].Payload)
				}
			} else if enc := appendRecord(nil, r.Offset, r.Type, r.Payload); !bytes.Contains(body[pos:], enc) {
				t.Fatalf("record %d kept after damage is not in the bytes", r.Offset)
			}
		}

		extra := Entry{Type: 3, Payload: []byte("after recovery")}
		res, err := l.Append(testCtx(t), []Entry{extra}, AfterFsync)
		if err != nil || res.First != rep.End {
			t.Fatalf("append after recovery: %+v %v", res, err)
		}
		got = append(got, Record{Offset: res.First, Type: extra.Type, Payload: extra.Payload})
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l = mustOpen(t, fs, dir, opts)
		defer l.Close()
		if again := l.Recovery(); again.Stop != nil || again.End != rep.End+1 || again.LostRecords != lost {
			t.Fatalf("reopen %+v, want a clean end at %d with %d lost", again, rep.End+1, lost)
		}
		again, _ := readAround(t, l)
		checkSameRecords(t, again, got)
	})
}

// readAround reads every record from the head to the written frontier,
// stepping over holes, and returns them with the offsets the holes took.
func readAround(t testing.TB, l *Log) ([]Record, uint64) {
	t.Helper()
	var out []Record
	var lost uint64
	for from := l.Head(); from < l.WrittenNext(); {
		recs, err := l.ReadWritten(from, 1<<20)
		var he *HoleError
		if errors.As(err, &he) {
			if he.Hole.From > from || he.Hole.To <= from {
				t.Fatalf("read at %d met hole %+v", from, he.Hole)
			}
			lost += he.Hole.To - from
			from = he.Hole.To
			continue
		}
		if err != nil || len(recs) == 0 {
			t.Fatalf("read at %d: %d records, %v", from, len(recs), err)
		}
		for _, r := range recs {
			if r.Offset != from {
				t.Fatalf("read at %d returned offset %d", from, r.Offset)
			}
			out = append(out, Record{Offset: r.Offset, Type: r.Type, Payload: bytes.Clone(r.Payload)})
			from++
		}
	}
	return out, lost
}

func checkSameRecords(t *testing.T, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for i, r := range got {
		if r.Offset != want[i].Offset || r.Type != want[i].Type || !bytes.Equal(r.Payload, want[i].Payload) {
			t.Fatalf("record %d read as offset %d type %d %q, want offset %d type %d %q",
				i, r.Offset, r.Type, r.Payload, want[i].Offset, want[i].Type, want[i].Payload)
		}
	}
}

// FuzzDamagedSegment builds a valid segment of up to 40 records, applies
// fuzz-chosen damage to its records (bit flips, ranges overwritten, and in
// a sealed segment zeroed ranges), and opens the log: the segment is the
// active one, or a sealed one read after the open. Recovery must not
// panic; every record the damage did not touch must read back with its
// exact payload, every record returned must be the one written at its
// offset, and the holes may hold only touched records, all counted as lost.
func FuzzDamagedSegment(f *testing.F) {
	f.Add(uint8(10), false, []byte{0, 40, 0, 3})
	f.Add(uint8(10), true, []byte{0, 40, 0, 3})
	f.Add(uint8(20), false, []byte{1, 100, 0, 30, 0, 200, 1, 7})
	f.Add(uint8(20), true, []byte{2, 100, 0, 200, 0, 50, 2, 1})
	f.Add(uint8(3), false, []byte{0, 255, 255, 0}) // the last record
	f.Add(uint8(39), true, []byte{1, 0, 0, 47, 1, 0, 4, 47, 0, 9, 9, 9})
	opts := Options{SegmentSize: 64 << 10, IndexSpacing: 64, MaxRecordSize: fuzzMaxRecord,
		BackgroundSyncInterval: -1, TailCacheBytes: -1, Logger: discardLogger()}
	f.Fuzz(func(t *testing.T, n uint8, sealed bool, ops []byte) {
		count := 1 + int(n)%40
		body := fuzzRecords(nil, 0, count)
		want := make([]Record, 0, count)
		starts := make([]int, 0, count+1)
		for pos, o := 0, uint64(0); pos < len(body); o++ {
			rec, used, _, _ := decodeRecord(body[pos:], o, fuzzMaxRecord)
			want, starts = append(want, Record{Offset: o, Type: rec.Type, Payload: bytes.Clone(rec.Payload)}), append(starts, pos)
			pos += used
		}
		starts = append(starts, len(body))
		touched := make([]bool, len(body))
		for i := 0; i+4 <= len(ops) && i < 8*4; i += 4 {
			kind, at, arg := ops[i]%3, int(ops[i+1])<<8|int(ops[i+2]), ops[i+3]
			at %= len(body)
			switch {
			case kind == 0:
				body[at] ^= 1 << (arg % 8)
				touched[at] = true
			case kind == 1 || !sealed: // an active segment's zeros are its end
				for j := at; j < min(len(body), at+1+int(arg)%48); j++ {
					body[j], touched[j] = arg|0x80, true
				}
			default:
				for j := at; j < min(len(body), at+1+int(arg)*4); j++ {
					body[j], touched[j] = 0, true
				}
			}
		}
		if !sealed {
			hdr := len(encodeSegmentHeader(0))
			for _, p := range starts[:count] {
				if allZero(body[p:min(len(body), p+recordHeaderSize)]) {
					t.Skip("the damage wrote a zero header: the clean end of an active segment")
				}
				// A record's bytes zeroed from its start up to the next
				// sector boundary are what a torn write leaves, and the
				// active segment's scan cuts there by design (resync.go):
				// damage that makes that shape, however few the bytes
				// (a zeroed byte beside the length's zero high bytes),
				// is a torn tail to it.
				if lead := body[p:min(len(body), (hdr+p)/sectorSize*sectorSize+sectorSize-hdr)]; (hdr+p)%sectorSize != 0 &&
					allZero(lead) && slices.Contains(touched[p:p+len(lead)], true) {
					t.Skip("the damage zeroed a record up to a sector boundary: a torn write's shape, cut by design")
				}
			}
		}

		fs, dir := vfs.NewMem(), "log"
		if err := fs.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		rewriteFile(t, fs, segmentPath(fs, dir, 0), append(encodeSegmentHeader(0), body...))
		if sealed {
			rewriteFile(t, fs, segmentPath(fs, dir, uint64(count)), encodeSegmentHeader(uint64(count)))
		}
		l := mustOpen(t, fs, dir, opts)
		defer l.Close()
		got, lost := readAround(t, l)
		if lost != l.LostRecords() || (!sealed && lost != l.Recovery().LostRecords) {
			t.Fatalf("read around %d lost records; the log counts %d, recovery %d", lost, l.LostRecords(), l.Recovery().LostRecords)
		}
		returned := map[uint64]bool{}
		for _, r := range got {
			w := want[r.Offset]
			if r.Type != w.Type || !bytes.Equal(r.Payload, w.Payload) {
				t.Fatalf("record %d read as type %d %q, written as type %d %q", r.Offset, r.Type, r.Payload, w.Type, w.Payload)
			}
			returned[r.Offset] = true
		}
		for o := range want {
			hit := false
			for _, tc := range touched[starts[o]:starts[o+1]] {
				hit = hit || tc
			}
			if !hit && !returned[uint64(o)] {
				t.Fatalf("record %d was not touched by the damage and was lost (recovery %+v)", o, l.Recovery())
			}
		}
		if n := uint64(len(got)) + lost; n > uint64(count) || (sealed && n != uint64(count)) {
			t.Fatalf("%d records and %d lost from %d written", len(got), lost, count)
		}
	})
}
