package wire

import (
	"bytes"
	"errors"
	"testing"
)

func TestWriterRefusesOversizedFrame(t *testing.T) {
	var conn bytes.Buffer
	w := NewWriter(&conn, Options{MaxFrame: MinFrameLimit})
	if err := w.WriteFrame(&Credit{SubID: 1}); err != nil {
		t.Fatal(err)
	}
	before := w.Buffered()
	err := w.WriteFrame(&Publish{Queue: "q", Body: make([]byte, MinFrameLimit)})
	if !errors.Is(err, ErrFrameTooLarge) || !errors.Is(err, ErrProtocol) {
		t.Fatalf("err = %v", err)
	}
	if w.Buffered() != before {
		t.Fatal("a refused frame left bytes in the buffer")
	}
	// The Writer is still usable, and the peer's limit can be raised.
	w.SetMaxFrame(1 << 20)
	if err := w.WriteFrame(&Publish{Queue: "q", Body: make([]byte, MinFrameLimit)}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got, err := readAll(NewReader(&conn, Options{}))
	if len(got) != 2 || got[0].Type() != TypeCredit || got[1].Type() != TypePublish {
		t.Fatalf("read %v, %v", got, err)
	}
}

func TestWriterRefusesInvalidFrame(t *testing.T) {
	var conn bytes.Buffer
	w := NewWriter(&conn, Options{})
	if err := w.WriteFrame(&Publish{Queue: longString}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("err = %v", err)
	}
	if err := w.WriteFrame(&Declare{Queue: "q", Durability: 9}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("err = %v", err)
	}
	if w.Buffered() != 0 {
		t.Fatal("refused frames left bytes in the buffer")
	}
	if err := w.WriteFrame(&Heartbeat{}); err != nil {
		t.Fatal(err)
	}
}

func TestWriterFlushesWhenFull(t *testing.T) {
	var conn bytes.Buffer
	w := NewWriter(&conn, Options{BufferSize: 64})
	for range 20 {
		if err := w.WriteFrame(&Credit{SubID: 1, Credit: 1}); err != nil { // 13 bytes
			t.Fatal(err)
		}
	}
	if conn.Len() == 0 || conn.Len()+w.Buffered() != 20*13 || w.Buffered() >= 64 {
		t.Fatalf("written %d, buffered %d", conn.Len(), w.Buffered())
	}
	w.Flush()
	if conn.Len() != 20*13 || w.Buffered() != 0 {
		t.Fatalf("written %d, buffered %d", conn.Len(), w.Buffered())
	}
}

func TestWriterErrorSticks(t *testing.T) {
	boom := errors.New("connection reset")
	w := NewWriter(errWriter{boom}, Options{})
	w.WriteFrame(&Heartbeat{})
	if err := w.Flush(); !errors.Is(err, boom) {
		t.Fatalf("Flush = %v", err)
	}
	if err := w.WriteFrame(&Heartbeat{}); !errors.Is(err, boom) {
		t.Fatalf("WriteFrame after failure = %v", err)
	}
	if err := w.Flush(); !errors.Is(err, boom) {
		t.Fatalf("Flush after failure = %v", err)
	}
}

// After a large frame the Writer does not keep a large buffer.
func TestWriterDropsLargeBuffer(t *testing.T) {
	var conn bytes.Buffer
	w := NewWriter(&conn, Options{BufferSize: 1024})
	if err := w.WriteFrame(&Publish{Queue: "q", Body: make([]byte, 1<<20)}); err != nil {
		t.Fatal(err)
	}
	if cap(w.buf) > 4*1024 {
		t.Fatalf("kept a buffer of %d bytes", cap(w.buf))
	}
}

// Writing a frame allocates nothing once the buffer exists.
func TestWriteFrameAllocs(t *testing.T) {
	w := NewWriter(discard{}, Options{BufferSize: 1 << 10})
	f := &Deliver{SubID: 1, Tag: 2, MessageID: "m", Headers: []Header{{"k", "v"}}, Body: make([]byte, 100)}
	allocs := testing.AllocsPerRun(1000, func() {
		if err := w.WriteFrame(f); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per WriteFrame", allocs)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
