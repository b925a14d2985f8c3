package wal

import (
	"bytes"
	"errors"
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
