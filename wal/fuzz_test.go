package wal

import (
	"bytes"
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
// followed by arbitrary bytes. Open must not panic or fail; it must keep
// exactly the records a plain decode of the bytes accepts, in order, stop
// cleanly only at zeros, and leave a log that takes an append and reopens
// cleanly with everything in it.
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
		if (rep.Stop == nil) != (stop == decodeEnd) {
			t.Fatalf("recovery stop %v after a decode ending with status %d", rep.Stop, stop)
		}
		if rep.End != uint64(len(want)) || l.WrittenNext() != uint64(len(want)) || rep.ScannedBytes != int64(segmentHeaderSize+pos) {
			t.Fatalf("recovery %+v, WrittenNext %d: want %d records in %d bytes",
				rep, l.WrittenNext(), len(want), segmentHeaderSize+pos)
		}
		checkFuzzedRecords(t, l, want)

		extra := Entry{Type: 3, Payload: []byte("after recovery")}
		res, err := l.Append(testCtx(t), []Entry{extra}, AfterFsync)
		if err != nil || res.First != uint64(len(want)) {
			t.Fatalf("append after recovery: %+v %v", res, err)
		}
		want = append(want, Record{Offset: res.First, Type: extra.Type, Payload: extra.Payload})
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l = mustOpen(t, fs, dir, opts)
		defer l.Close()
		if rep := l.Recovery(); rep.Stop != nil || rep.End != uint64(len(want)) {
			t.Fatalf("reopen %+v, want a clean end at %d", rep, len(want))
		}
		checkFuzzedRecords(t, l, want)
	})
}

func checkFuzzedRecords(t *testing.T, l *Log, want []Record) {
	t.Helper()
	got := readAll(t, l, true)
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}
	for i, r := range got {
		if r.Offset != uint64(i) || r.Type != want[i].Type || !bytes.Equal(r.Payload, want[i].Payload) {
			t.Fatalf("record %d read as offset %d type %d %q, want type %d %q",
				i, r.Offset, r.Type, r.Payload, want[i].Type, want[i].Payload)
		}
	}
}
