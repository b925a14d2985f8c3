package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"reflect"
	"slices"
	"sync"
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
		s.sums = append(s.sums, crc32.ChecksumIEEE(rec.Payload))
	})
	return s
}

// watchedReader records where each read starts, and fails the test if
// two reads overlap in time or one is still running when the scan returns.
type watchedReader struct {
	t        testing.TB
	r        io.ReaderAt
	mu       sync.Mutex
	inFlight int
	reads    []int64
	failFrom int64 // reads starting here or later fail with errScanTest; 0: none
}

var errScanTest = errors.New("injected read error")

func (w *watchedReader) ReadAt(p []byte, off int64) (int, error) {
	w.mu.Lock()
	w.inFlight++
	w.reads = append(w.reads, off)
	if w.inFlight > 1 {
		w.t.Errorf("two reads of the segment at once (one at %d)", off)
	}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.inFlight--
		w.mu.Unlock()
	}()
	if w.failFrom > 0 && off >= w.failFrom {
		return 0, errScanTest
	}
	return w.r.ReadAt(p, off)
}

// scanWatched scans through a watchedReader and checks that no read
// outlives the scan.
func scanWatched(t *testing.T, w *watchedReader, limit uint64, mode scanMode, chunk int64) scanned {
	t.Helper()
	got := scanWith(w, limit, mode, chunk)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inFlight != 0 {
		t.Fatalf("%d reads of the segment still running after the scan returned", w.inFlight)
	}
	return got
}

// checkChunkedScan scans body in 64 KiB chunks, read ahead, and in one read
// of the whole file: both must find and visit exactly the same. It returns
// where the chunked scan read.
func checkChunkedScan(t *testing.T, body []byte, limit uint64, mode scanMode) []int64 {
	t.Helper()
	w := &watchedReader{t: t, r: bytes.NewReader(body)}
	chunked := scanWatched(t, w, limit, mode, 64<<10)
	whole := scanWith(bytes.NewReader(body), limit, mode, max(int64(len(body)), 64<<10))
	if !reflect.DeepEqual(chunked, whole) {
		t.Fatalf("chunked scan: end %d pos %d, %d visited, %d damaged, stop %v, err %v;\nwhole scan: end %d pos %d, %d visited, %d damaged, stop %v, err %v",
			chunked.res.end, chunked.res.pos, len(chunked.offsets), len(chunked.res.damage), chunked.res.stop, chunked.err,
			whole.res.end, whole.res.pos, len(whole.offsets), len(whole.res.damage), whole.res.stop, whole.err)
	}
	return w.reads
}

func TestScanInChunksFindsWhatOneReadFinds(t *testing.T) {
	seed := make([]byte, 400)
	for i := range seed {
		seed[i] = byte(i*37 + i*i)
	}
	clean, n := scanRecords(seed, -1, 128<<10, 2<<20)
	full := scanBody(seed, -1, 0)
	for _, c := range []struct {
		name  string
		body  []byte
		limit uint64
		mode  scanMode
	}{
		{"active, clean", clean, ^uint64(0), scanActive},
		{"active, torn tail", full[:len(full)-100], ^uint64(0), scanActive},
		{"active, damage mid-way", scanBody(seed, 300<<10, 128<<10), ^uint64(0), scanActive},
		{"sealed, damage mid-way", scanBody(seed, 300<<10, 0), 200, scanSealed},
		{"sealed, limit inside", full, 57, scanSealed},
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

// recordsOf appends records of the given payload sizes to body, offsets
// from first on; a payload fill of 0 makes payloads of zeros.
func recordsOf(body []byte, first uint64, fill byte, sizes ...int) []byte {
	for i, size := range sizes {
		p := payload(int(first)+i, size)
		if fill == 0 {
			p = make([]byte, size)
		}
		body = appendRecord(body, first+uint64(i), 1, p)
	}
	return body
}

// TestScanUsesWhatItReadAhead: with records shorter than the room kept
// before a chunk, every chunk is read once, at its own position: the
// record a chunk cuts is copied in front of the next, not read again.
func TestScanUsesWhatItReadAhead(t *testing.T) {
	body := recordsOf(encodeSegmentHeader(0), 0, 1, slices.Repeat([]int{1000}, 1100)...) // about 1.1 MiB
	reads := checkChunkedScan(t, body, ^uint64(0), scanActive)
	for i, off := range reads {
		if want := int64(segmentHeaderSize + i*64<<10); off != want {
			t.Fatalf("read %d at %d, want %d (every chunk read once, end to end): %v", i, off, want, reads)
		}
	}
	if want := (len(body)-segmentHeaderSize)/(64<<10) + 1; len(reads) != want {
		t.Fatalf("%d reads, want %d", len(reads), want)
	}
}

// TestScanReadsAgainWhatTheRoomCannotHold covers the reads ahead that
// miss and the chunks that start none: a record longer than the room cut
// by a chunk's end, payloads of zeros at a chunk's end, a record longer
// than a chunk, and zeros cutting a header.
func TestScanReadsAgainWhatTheRoomCannotHold(t *testing.T) {
	chunkEnd := segmentHeaderSize + 64<<10
	// Small records up to 12 KiB before the first chunk's end, then one of
	// 20 KiB that the chunk cuts after 12 KiB, more than the 8 KiB room.
	body := encodeSegmentHeader(0)
	n := uint64(0)
	for len(body)+encodedSize(1000) < chunkEnd-12<<10 {
		body = recordsOf(body, n, 1, 1000)
		n++
	}
	longAt := int64(len(body))
	body = recordsOf(body, n, 1, 20<<10)
	n++
	body = recordsOf(body, n, 1, slices.Repeat([]int{1000}, 100)...)
	reads := checkChunkedScan(t, body, ^uint64(0), scanActive)
	if !slices.Contains(reads, longAt) {
		t.Fatalf("the long record cut at a chunk's end (at %d) was not read again from its start: reads at %v", longAt, reads)
	}

	// Payloads of zeros ending at a chunk's end, a record longer than a
	// chunk after them, and more small records: in both modes, with a
	// limit inside for the sealed scan.
	body = recordsOf(encodeSegmentHeader(0), 0, 0, slices.Repeat([]int{1000}, 150)...)
	body = recordsOf(body, 150, 1, 100<<10, 3, 70<<10)
	body = recordsOf(body, 153, 1, slices.Repeat([]int{900}, 200)...)
	checkChunkedScan(t, body, ^uint64(0), scanActive)
	checkChunkedScan(t, body, 300, scanSealed)
	checkChunkedScan(t, append(body, make([]byte, 64<<10)...), ^uint64(0), scanActive)

	// A header cut after its first byte, the rest of its length zeros.
	body = encodeSegmentHeader(0)
	for n = 0; len(body)+encodedSize(1000) <= chunkEnd-1; n++ {
		body = recordsOf(body, n, 1, 1000)
	}
	pad := chunkEnd - 1 - len(body) - recordHeaderSize // the next record starts 1 byte before the end
	if pad >= 0 {
		body = recordsOf(body, n, 1, pad)
		n++
	}
	body = recordsOf(body, n, 1, 0x100, 5, 6)
	checkChunkedScan(t, body, ^uint64(0), scanActive)
}

// TestScanReportsAReadAheadThatFailed: a read ahead that fails is the
// scan's error, at the position it needed, and no read outlives it.
func TestScanReportsAReadAheadThatFailed(t *testing.T) {
	body := recordsOf(encodeSegmentHeader(0), 0, 1, slices.Repeat([]int{1000}, 300)...)
	w := &watchedReader{t: t, r: bytes.NewReader(body), failFrom: segmentHeaderSize + 64<<10}
	got := scanWatched(t, w, ^uint64(0), scanActive, 64<<10)
	if !errors.Is(got.err, errScanTest) {
		t.Fatalf("scan with its second chunk unreadable: err %v, want the read's error", got.err)
	}
	if want := (64 << 10) / encodedSize(1000); len(got.offsets) != want {
		t.Fatalf("visited %d records before the failed read, want %d", len(got.offsets), want)
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
					if off != segmentHeaderSize+64<<10 {
						t.Errorf("the read ahead starts at %d, want at the first 64 KiB chunk's end, %d", off, segmentHeaderSize+64<<10)
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
