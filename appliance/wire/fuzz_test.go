package wire

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
)

// FuzzReadFrame feeds arbitrary bytes to a Reader, at every protocol
// version (the layouts of Deliver, Declare, Confirm and Nack differ between
// them, and versions 4 and 5 add frame types). It must never panic;
// it must allocate in proportion to the bytes it was given, however large
// the lengths and counts those bytes claim; every error must be io.EOF,
// io.ErrUnexpectedEOF or a protocol error; and every frame it returns must
// encode back to exactly the bytes it came from and decode to an equal
// value.
func FuzzReadFrame(f *testing.F) {
	var stream []byte
	for _, fr := range sampleFrames() {
		for v := MinVersion; v <= Version; v++ {
			b, err := appendFrame(nil, fr, MaxFrameLimit, v)
			if err != nil {
				continue // the invalid zero frames, and frames newer than v
			}
			f.Add(b)
			if v == Version {
				stream = append(stream, b...)
			}
		}
	}
	f.Add(stream)
	f.Add(append(u32(DefaultMaxFrame), byte(TypePublish)))
	f.Add(raw(TypeAck, u32(1), u32(0xFFFFFFFF), u64(1)))
	f.Add(raw(TypePublish, u64(1), str("q"), str(""), str(""), u16(0xFFFF), u32(0)))
	f.Add(raw(TypeDeclared, u64(1), str("q"), u8(0), u16(1), u8(0), str("")))
	f.Add(raw(TypeSubscribe, u64(1), u32(1), str("q\xff"), u32(1)))
	// Version 5: a partition count past the body, and a frontier cut short.
	f.Add(raw(TypeQueueInfoReply, u64(1), str("q"), u8(1), u64(0), u64(0), u64(0), u32(0), str(""), u16(0xFFFF)))
	f.Add(raw(TypeQueueInfoReply, u64(1), str("q"), u8(2), u64(3), u64(1), u64(9), u32(1), str(""), u16(1), u64(5)))
	f.Add(raw(TypeDeleteQueue, u64(1), str("q"), u8(2)))
	f.Add(raw(TypeError, u64(1), u16(uint16(CodeServedElsewhere)), str("queue q is served by node n2")))
	// Version 5: a Nack's delay cut short, an Extend's tag count past the
	// body, and a version 4 Nack (no delay) that version 5 reads short.
	f.Add(raw(TypeNack, u32(1), u32(1), u64(5), u8(1), u16(1)))
	f.Add(raw(TypeNack, u32(1), u32(1), u64(5), u8(1), u32(0xFFFFFFFF)))
	f.Add(raw(TypeNack, u32(1), u32(1), u64(5), u8(1)))
	f.Add(raw(TypeExtend, u32(1), u32(0xFFFFFFFF), u64(1)))
	f.Add(raw(TypeExtend, u32(1), u32(1), u64(1), u8(0)))

	f.Fuzz(func(t *testing.T, data []byte) {
		// The default options, and a small limit and buffer, so that both
		// read paths and the size check are exercised.
		for v := MinVersion; v <= Version; v++ {
			for _, opts := range []Options{{}, {MaxFrame: MinFrameLimit, BufferSize: 32}} {
				r := NewReader(bytes.NewReader(data), opts)
				r.SetVersion(v)
				frames := make([]Frame, 0, 64)
				before := heapAllocs()
				frames, err := readAllInto(r, frames)
				if allocated, bound := heapAllocs()-before, uint64(16*len(data)+1<<20); allocated > bound {
					t.Fatalf("read %d bytes, allocated %d (bound %d)", len(data), allocated, bound)
				}
				if err != io.EOF && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, ErrProtocol) {
					t.Fatalf("unexpected error %v", err)
				}
				checkReencoding(t, data, frames, v)
			}
		}
	})
}

func readAllInto(r *Reader, frames []Frame) ([]Frame, error) {
	for {
		f, err := r.ReadFrame()
		if err != nil {
			return frames, err
		}
		frames = append(frames, f)
	}
}

// checkReencoding encodes frames back to back in version v's layout: the
// result must be the start of data, and must read back as the same frames.
func checkReencoding(t *testing.T, data []byte, frames []Frame, v uint16) {
	t.Helper()
	var enc []byte
	for _, f := range frames {
		var err error
		if enc, err = appendFrame(enc, f, MaxFrameLimit, v); err != nil {
			t.Fatalf("a decoded %s does not encode: %v", f.Type(), err)
		}
	}
	if !bytes.HasPrefix(data, enc) {
		t.Fatalf("re-encoding differs from the input:\n got % x\nwant % x", enc, data[:min(len(data), len(enc))])
	}
	r := NewReader(bytes.NewReader(enc), Options{})
	r.SetVersion(v)
	again, err := readAll(r)
	if err != io.EOF {
		t.Fatalf("re-encoded frames do not read back: %v", err)
	}
	if len(frames) == 0 {
		frames = nil
	}
	if !reflect.DeepEqual(again, frames) {
		t.Fatalf("re-encoded frames decode differently:\n got %#v\nwant %#v", again, frames)
	}
}
