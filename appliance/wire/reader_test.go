package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
)

func TestReaderStream(t *testing.T) {
	frames := sampleFrames()[1:] // skip the zero Hello only to vary the start
	var conn bytes.Buffer
	w := NewWriter(&conn, Options{BufferSize: 100})
	var valid []Frame
	for _, f := range frames {
		if f.Validate() != nil {
			continue
		}
		valid = append(valid, f)
		if err := w.WriteFrame(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, bufSize := range []int{0, 16, 64} {
		r := NewReader(bytes.NewReader(conn.Bytes()), Options{BufferSize: bufSize})
		got, err := readAll(r)
		if err != io.EOF {
			t.Fatalf("buffer %d: %v", bufSize, err)
		}
		if !reflect.DeepEqual(got, valid) {
			t.Fatalf("buffer %d: frames differ", bufSize)
		}
	}
}

// A frame's bytes stay its own after later reads, on both read paths.
func TestFramesOwnTheirBytes(t *testing.T) {
	var conn bytes.Buffer
	w := NewWriter(&conn, Options{})
	for _, b := range []byte{1, 2, 3} {
		if err := w.WriteFrame(&Publish{Queue: "q", Body: bytes.Repeat([]byte{b}, 200)}); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	for _, bufSize := range []int{64, 4096} {
		r := NewReader(bytes.NewReader(conn.Bytes()), Options{BufferSize: bufSize})
		got, err := readAll(r)
		if err != io.EOF || len(got) != 3 {
			t.Fatal(err)
		}
		for i, f := range got {
			if !bytes.Equal(f.(*Publish).Body, bytes.Repeat([]byte{byte(i + 1)}, 200)) {
				t.Fatalf("buffer %d: frame %d body overwritten", bufSize, i)
			}
		}
	}
}

func TestReaderMaxFrame(t *testing.T) {
	big := mustEncode(t, &Publish{Queue: "q", Body: make([]byte, 10000)})
	r := NewReader(bytes.NewReader(big), Options{MaxFrame: MinFrameLimit})
	if _, err := r.ReadFrame(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("err = %v", err)
	}
	r = NewReader(bytes.NewReader(big), Options{MaxFrame: MinFrameLimit})
	r.SetMaxFrame(20000)
	if _, err := r.ReadFrame(); err != nil {
		t.Fatal(err)
	}
	r.SetMaxFrame(1)
	if r.MaxFrame() != MinFrameLimit {
		t.Fatalf("SetMaxFrame(1) gave %d", r.MaxFrame())
	}
}

func TestReaderBuffered(t *testing.T) {
	two := append(mustEncode(t, &Heartbeat{}), mustEncode(t, &Credit{SubID: 1, Credit: 2})...)
	r := NewReader(bytes.NewReader(two), Options{})
	if _, err := r.ReadFrame(); err != nil {
		t.Fatal(err)
	}
	if r.Buffered() != len(two)-5 {
		t.Fatalf("Buffered = %d", r.Buffered())
	}
	if _, err := r.ReadFrame(); err != nil {
		t.Fatal(err)
	}
	if r.Buffered() != 0 {
		t.Fatalf("Buffered = %d", r.Buffered())
	}
}

func TestNewReaderReusesBufio(t *testing.T) {
	br := bufio.NewReaderSize(bytes.NewReader(nil), 1<<20)
	if r := NewReader(br, Options{}); r.br != br {
		t.Fatal("a large enough bufio.Reader should be used as is")
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{{}, {MaxFrame: MinFrameLimit}, {MaxFrame: MaxFrameLimit, BufferSize: 16}} {
		if err := o.Validate(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
	for _, o := range []Options{{MaxFrame: 1}, {MaxFrame: MaxFrameLimit + 1}, {BufferSize: -1}, {BufferSize: 8}} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

// Reading a small frame allocates the frame and nothing else.
// With BorrowPublishBodies a Publish read from the buffer keeps its Body
// there: nothing is allocated for it, and it holds the frame's bytes until
// the next read. A frame larger than the buffer still owns its body.
func TestReaderBorrowsPublishBodies(t *testing.T) {
	small := &Publish{Corr: 1, Queue: "q", Body: bytes.Repeat([]byte("b"), 1000)}
	r := NewReader(&repeatReader{data: mustEncode(t, small)}, Options{BorrowPublishBodies: true})
	var body []byte
	allocs := testing.AllocsPerRun(100, func() {
		f, err := r.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		body = f.(*Publish).Body
	})
	if !bytes.Equal(body, small.Body) {
		t.Fatalf("borrowed body %q", body)
	}
	if allocs > 2 { // the frame and its queue name
		t.Fatalf("%v allocations per Publish read with a borrowed body, want at most 2", allocs)
	}

	var conn bytes.Buffer
	w := NewWriter(&conn, Options{})
	large := &Publish{Corr: 2, Queue: "q", Body: bytes.Repeat([]byte("L"), 300)}
	for _, f := range []Frame{large, &Publish{Corr: 3, Queue: "q", Body: bytes.Repeat([]byte("x"), 300)}} {
		if err := w.WriteFrame(f); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	r = NewReader(bytes.NewReader(conn.Bytes()), Options{BufferSize: 64, BorrowPublishBodies: true})
	f, err := r.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadFrame(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.(*Publish).Body, large.Body) {
		t.Fatal("a frame larger than the buffer lost its body to the next read")
	}
}

func TestReadFrameAllocs(t *testing.T) {
	cases := []struct {
		frame Frame
		max   float64
	}{
		{&Heartbeat{}, 0},
		{&Credit{SubID: 1, Credit: 10}, 1},
		{&Ack{SubID: 1, Tags: []uint64{1, 2, 3}}, 2}, // frame, tags
		{&Deliver{SubID: 1, MessageID: "m", Headers: []Header{{"k", "v"}}, Body: []byte("b")}, 6}, // frame, id, headers, key, value, body
	}
	for _, c := range cases {
		r := NewReader(&repeatReader{data: mustEncode(t, c.frame)}, Options{})
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := r.ReadFrame(); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > c.max {
			t.Errorf("%s: %v allocations per read, want at most %v", c.frame.Type(), allocs, c.max)
		}
	}
}

// Growing the buffer between frames keeps what was buffered: a server
// reads the Hello with a small buffer and the frames a client pipelined
// behind it still arrive whole and in order.
func TestReaderSetBufferSize(t *testing.T) {
	var conn bytes.Buffer
	w := NewWriter(&conn, Options{})
	sent := []Frame{&Hello{Version: Version, ClientName: "c"}}
	for i := range 20 {
		sent = append(sent, &Publish{Corr: uint64(i + 1), Queue: "q", Body: bytes.Repeat([]byte{byte(i)}, 700)})
	}
	for _, f := range sent {
		if err := w.WriteFrame(f); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	r := NewReader(bytes.NewReader(conn.Bytes()), Options{BufferSize: 4096})
	first, err := r.ReadFrame()
	if err != nil || r.Buffered() == 0 {
		t.Fatalf("first frame: %v, %d bytes buffered behind it (the test needs some)", err, r.Buffered())
	}
	r.SetBufferSize(64 << 10)
	if r.BufferSize() != 64<<10 {
		t.Fatalf("buffer is %d bytes after SetBufferSize(64 KiB)", r.BufferSize())
	}
	r.SetBufferSize(16) // never shrinks
	rest, err := readAll(r)
	if err != io.EOF {
		t.Fatal(err)
	}
	if got := append([]Frame{first}, rest...); !reflect.DeepEqual(got, sent) {
		t.Fatalf("read %d frames, sent %d, or they differ", len(got), len(sent))
	}
}

// FrameBuffered says whether the next frame is whole in the buffer: not
// with nothing buffered, nor with a part of a frame (a part of its length,
// or of its body), and yes once all of it has arrived.
func TestReaderFrameBuffered(t *testing.T) {
	hb := mustEncode(t, &Heartbeat{})
	frame := mustEncode(t, &Credit{SubID: 1, Credit: 2})
	if r := NewReader(bytes.NewReader(frame), Options{}); r.FrameBuffered() {
		t.Fatal("FrameBuffered with nothing read")
	}
	for _, c := range []struct {
		name string
		tail []byte
		want bool
	}{
		{"a part of its length", frame[:2], false},
		{"its length and a part of its body", frame[:len(frame)-1], false},
		{"all of it", frame, true},
	} {
		// Reading the Heartbeat in front buffers what follows it.
		r := NewReader(bytes.NewReader(append(append([]byte(nil), hb...), c.tail...)), Options{})
		if _, err := r.ReadFrame(); err != nil {
			t.Fatal(err)
		}
		if r.Buffered() != len(c.tail) || r.FrameBuffered() != c.want {
			t.Fatalf("%s: %d bytes buffered, FrameBuffered %v, want %v", c.name, r.Buffered(), r.FrameBuffered(), c.want)
		}
	}
}
