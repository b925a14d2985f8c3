package wal

import (
	"bytes"
	"encoding/binary"
	"io"
	"reflect"
	"sync/atomic"
	"testing"
	"time"
)

// scanBody builds a segment (header, then records) from seed: each pair
// of bytes sizes one record, from empty to past a 64 KiB scan buffer, so
// records cross chunk boundaries by less and by more than the read-ahead's
// overlap. flip, when inside the records, damages one byte; tail zeros
// follow them, as in a preallocated active segment.
func scanBody(seed []byte, flip int, tail int) []byte {
	body, _ := scanRecords(seed, flip, tail, 2<<20)
	return body
}

// scanRecords is scanBody, with the number of records it wrote, and no
// record started past limit bytes.
func scanRecords(seed []byte, flip int, tail int, limit int) ([]byte, int) {
	body, n := encodeSegmentHeader(0), 0
	for i := 0; i+1 < len(seed) && len(body) < limit; i, n = i+2, n+1 {
		size := int(binary.LittleEndian.Uint16(seed[i:]))
		if seed[i]%7 == 0 {
			size = 70<<10 + size // longer than the 64 KiB buffer
		}
		o := uint64(i / 2)
		body = appendRecord(body, o, byte(1+o%7), payload(int(o), size))
	}
	if flip >= segmentHeaderSize && flip < len(body) {
		body[flip] ^= 0x5a
	}
	return append(body, make([]byte, tail)...), n
}

// scanned is what one scan found and visited.
type scanned struct {
	res     scanResult
	offsets []uint64
	sums    []uint32
	err     error
}

func scanWith(r io.ReaderAt, limit uint64, mode scanMode, chunk int64) scanned {
	var s scanned
	s.res, s.err = scanSegment(r, 0, limit, mode, 1<<20, 4<<10, chunk, func(rec Record) {
		s.offsets = append(s.offsets, rec.Offset)
		s.sums = append(s.sums, crc(rec.Payload))
	})
	return s
}

func crc(b []byte) uint32 {
	var h uint32 = 2166136261
	for _, c := range b {
		h = (h ^ uint32(c)) * 16777619
	}
	return h
}

// checkChunkedScan scans body in 64 KiB chunks, read ahead, and in one read
// of the whole file: both must find and visit exactly the same.
func checkChunkedScan(t *testing.T, body []byte, limit uint64, mode scanMode) {
	t.Helper()
	r := bytes.NewReader(body)
	chunked := scanWith(r, limit, mode, 64<<10)
	whole := scanWith(r, limit, mode, max(int64(len(body)), 64<<10))
	if !reflect.DeepEqual(chunked, whole) {
		t.Fatalf("chunked scan: end %d pos %d, %d visited, %d damaged, stop %v, err %v;\nwhole scan: end %d pos %d, %d visited, %d damaged, stop %v, err %v",
			chunked.res.end, chunked.res.pos, len(chunked.offsets), len(chunked.res.damage), chunked.res.stop, chunked.err,
			whole.res.end, whole.res.pos, len(whole.offsets), len(whole.res.damage), whole.res.stop, whole.err)
	}
}

func TestScanInChunksFindsWhatOneReadFinds(t *testing.T) {
	seed := make([]byte, 400)
	for i := range seed {
		seed[i] = byte(i*37 + i*i)
	}
	clean, n := scanRecords(seed, -1, 128<<10, 2<<20)
	for _, c := range []struct {
		name  string
		body  []byte
		limit uint64
		mode  scanMode
	}{
		{"active, clean", clean, ^uint64(0), scanActive},
		{"active, torn tail", scanBody(seed, -1, 0)[:len(scanBody(seed, -1, 0))-100], ^uint64(0), scanActive},
		{"active, damage mid-way", scanBody(seed, 300<<10, 128<<10), ^uint64(0), scanActive},
		{"sealed, damage mid-way", scanBody(seed, 300<<10, 0), 200, scanSealed},
		{"sealed, limit inside", scanBody(seed, -1, 0), 57, scanSealed},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkChunkedScan(t, c.body, c.limit, c.mode)
		})
	}
	// The clean body's records are all found, in order.
	got := scanWith(bytes.NewReader(clean), ^uint64(0), scanActive, 64<<10)
	if got.err != nil || got.res.end != uint64(n) || len(got.offsets) != n || got.res.stop != nil || n < 40 {
		t.Fatalf("clean scan: end %d, %d visited, stop %v, err %v; want %d records (at least 40)", got.res.end, len(got.offsets), got.res.stop, got.err, n)
	}
}

// gatedReader holds every read after the first until open is closed (or
// for at most 30 s, so that a scan that does not read ahead fails, not
// hangs).
type gatedReader struct {
	r     io.ReaderAt
	n     atomic.Int32
	reads chan int64 // each read's offset, as it starts
	open  chan struct{}
}

func (g *gatedReader) ReadAt(p []byte, off int64) (int, error) {
	if g.n.Add(1) > 1 {
		g.reads <- off
		select {
		case <-g.open:
		case <-time.After(30 * time.Second):
		}
	}
	return g.r.ReadAt(p, off)
}

// TestScanReadsTheNextChunkWhileDecoding: the scan's second read starts
// before the first chunk's records are all visited. A scan that read only
// after decoding would wait here for a read that waits for it.
func TestScanReadsTheNextChunkWhileDecoding(t *testing.T) {
	body := encodeSegmentHeader(0)
	for o := uint64(0); len(body) < 1<<20; o++ {
		body = appendRecord(body, o, 1, payload(int(o), 1000))
	}
	g := &gatedReader{r: bytes.NewReader(body), reads: make(chan int64, 1<<10), open: make(chan struct{})}
	var visited int
	done := make(chan error, 1)
	go func() {
		_, err := scanSegment(g, 0, ^uint64(0), scanActive, 1<<20, 4<<10, 64<<10, func(Record) {
			if visited++; visited == 1 {
				select {
				case off := <-g.reads:
					if off <= segmentHeaderSize || off >= segmentHeaderSize+64<<10 {
						t.Errorf("the read ahead starts at %d, want inside the first 64 KiB chunk's end", off)
					}
				case <-time.After(30 * time.Second):
					t.Error("the first record was visited, and no second read started in 30 s")
				}
				close(g.open)
			}
		})
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if want := (len(body) - segmentHeaderSize) / encodedSize(1000); visited != want {
		t.Fatalf("visited %d records, want %d", visited, want)
	}
}

// FuzzScanChunked builds segments from arbitrary record sizes, damage and
// tails: a scan in 64 KiB chunks with its reads ahead finds and visits
// exactly what a scan of the whole file in one read does.
func FuzzScanChunked(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6}, 100, 0, false, uint8(0))
	f.Add(bytes.Repeat([]byte{0xff, 0x0f}, 60), 70000, 4096, false, uint8(0))
	f.Add(bytes.Repeat([]byte{0x00, 0x10, 0x33, 0x02}, 40), 150000, 64<<10, true, uint8(30))
	f.Fuzz(func(t *testing.T, seed []byte, flip int, tail int, sealed bool, limit uint8) {
		if len(seed) > 300 || tail < 0 || tail > 256<<10 {
			return
		}
		body, _ := scanRecords(seed, flip, tail, 512<<10) // eight chunks and more
		if sealed {
			checkChunkedScan(t, body, uint64(limit), scanSealed)
		} else {
			checkChunkedScan(t, body, ^uint64(0), scanActive)
		}
	})
}
