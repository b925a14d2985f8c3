package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// Every way a frame can be broken, one case each. All must fail with the
// listed error and none may allocate much.
func TestMalformedFrames(t *testing.T) {
	declare := func(durability, overflow uint8) []byte {
		return raw(TypeDeclare, u64(1), str("q"), u8(durability), u16(0), str(""),
			u32(0), u32(0), u64(0), u64(0), u8(overflow), u32(0), u64(0), u64(0))
	}
	cases := []struct {
		name  string
		frame []byte
		want  error
		field string
	}{
		{"length above limit", u32(DefaultMaxFrame + 1), ErrFrameTooLarge, ""},
		{"length 4 GiB", u32(0xFFFFFFFF), ErrFrameTooLarge, ""},
		{"length 0", append(u32(0), byte(TypeHeartbeat)), ErrMalformed, ""},
		{"type 0", raw(0), ErrUnknownFrame, ""},
		{"type 0x7f", raw(0x7f, u64(1)), ErrUnknownFrame, ""},
		{"type 0xff", raw(0xff), ErrUnknownFrame, ""},
		{"body below minimum", raw(TypeCredit, u16(1)), ErrMalformed, ""},
		{"fixed body too long", raw(TypeHeartbeat, u8(0)), ErrMalformed, ""},
		{"fixed body too short", raw(TypeConfirm, u64(1), u16(1), u64(1)), ErrMalformed, ""},
		{"truncated string", raw(TypeHello, u16(1), u16(100), []byte("short"), str("")), ErrMalformed, "Token"},
		{"truncated body field", raw(TypePublish, u64(1), str("q"), str(""), str(""), u16(0), u32(10), []byte("abc")), ErrMalformed, "Body"},
		{"trailing bytes", raw(TypeGoodbye, str("bye"), u8(0)), ErrMalformed, ""},
		{"trailing bytes after tags", raw(TypeAck, u32(1), u32(1), u64(7), u8(9)), ErrMalformed, ""},
		{"durability 3", declare(3, 0), ErrMalformed, "Durability"},
		{"overflow 3", declare(0, 3), ErrMalformed, "Overflow"},
		{"declared unspecified", raw(TypeDeclared, u64(1), str("q"), u8(0), u16(1), u8(0), str("")), ErrMalformed, "Durability"},
		{"bool 2", raw(TypeConfirm, u64(1), u16(0), u64(0), u8(2), u8(1)), ErrMalformed, "Duplicate"},
		{"confirm mode 3", raw(TypeConfirm, u64(1), u16(0), u64(0), u8(0), u8(3)), ErrMalformed, "Durability"},
		{"set mode unspecified", raw(TypeSetMode, u64(1), str("q"), u8(0)), ErrMalformed, "Durability"},
		{"info reply unspecified", raw(TypeQueueInfoReply, u64(1), str("q"), u8(0), u64(0), u64(0), u64(0), u32(0), str(""), u16(0)), ErrMalformed, "Durability"},
		{"info reply partitions past the body", raw(TypeQueueInfoReply, u64(1), str("q"), u8(1), u64(0), u64(0), u64(0), u32(0), str(""), u16(0xFFFF)), ErrMalformed, "Partitions"},
		{"info reply frontier cut short", raw(TypeQueueInfoReply, u64(1), str("q"), u8(1), u64(0), u64(0), u64(0), u32(0), str(""), u16(1), u64(5)), ErrMalformed, "Partitions"},
		{"if-empty 2", raw(TypeDeleteQueue, u64(1), str("q"), u8(2)), ErrMalformed, "IfEmpty"},
		{"requeue 255", raw(TypeNack, u32(1), u32(0), u8(255), u32(0)), ErrMalformed, "Requeue"},
		{"error code 0", raw(TypeError, u64(0), u16(0), str("")), ErrMalformed, "Code"},
		{"error code 999", raw(TypeSettleError, u32(1), u64(1), u16(999), str("")), ErrMalformed, "Code"},
		{"huge tag count", raw(TypeAck, u32(1), u32(0xFFFFFFFF), u64(1)), ErrMalformed, "Tags"},
		{"huge header count", raw(TypePublish, u64(1), str("q"), str(""), str(""), u16(0xFFFF), u32(0)), ErrMalformed, "Headers"},
		{"queue not UTF-8", raw(TypeSubscribe, u64(1), u32(1), str("q\xff"), u32(1)), ErrMalformed, "Queue"},
		{"header key not UTF-8", raw(TypeDeliver, u32(1), u64(1), u16(0), u64(0), u64(0), u32(1), str(""), str(""), u16(1), str("\xc3"), str(""), u32(0), u64(0)), ErrMalformed, "Headers.Key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, bufSize := range []int{0, 16} {
				r := NewReader(bytes.NewReader(c.frame), Options{BufferSize: bufSize})
				before := heapAllocs()
				f, err := r.ReadFrame()
				if allocated := heapAllocs() - before; allocated > 1<<20 {
					t.Errorf("allocated %d bytes", allocated)
				}
				if f != nil || !errors.Is(err, c.want) || !errors.Is(err, ErrProtocol) {
					t.Fatalf("ReadFrame (buffer %d) = %v, %v; want %v", bufSize, f, err, c.want)
				}
				var fe *FrameError
				if !errors.As(err, &fe) || fe.Field != c.field {
					t.Fatalf("error %v names field %q, want %q", err, fe.Field, c.field)
				}
			}
		})
	}
}

// The end of the stream is not a protocol error: io.EOF between frames,
// io.ErrUnexpectedEOF inside one.
func TestReadFrameEOF(t *testing.T) {
	whole := mustEncode(t, &Goodbye{Reason: "bye"})
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, io.EOF},
		{"half a length", whole[:2], io.ErrUnexpectedEOF},
		{"length only", whole[:4], io.ErrUnexpectedEOF},
		{"half a body", whole[:len(whole)-1], io.ErrUnexpectedEOF},
		{"claims 16 MiB, sends 1 KiB", append(append(u32(DefaultMaxFrame), byte(TypePublish)), make([]byte, 1024)...), io.ErrUnexpectedEOF},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := NewReader(bytes.NewReader(c.data), Options{})
			_, err := r.ReadFrame()
			if !errors.Is(err, c.want) || errors.Is(err, ErrProtocol) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if c.want == io.EOF && err != io.EOF {
				t.Fatalf("io.EOF must come unwrapped, got %v", err)
			}
		})
	}
}

// A peer that claims a large frame and sends a little of it costs one read
// chunk, not the claimed length.
func TestClaimedLengthDoesNotAllocate(t *testing.T) {
	data := append(append(u32(DefaultMaxFrame), byte(TypePublish)), make([]byte, 100<<10)...)
	r := NewReader(bytes.NewReader(data), Options{})
	before := heapAllocs()
	_, err := r.ReadFrame()
	allocated := heapAllocs() - before
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatal(err)
	}
	if allocated > 1<<20 {
		t.Fatalf("allocated %d bytes for a frame that sent 100 KiB", allocated)
	}
}
