package wire

import (
	"bytes"
	"encoding/binary"
	"runtime/metrics"
	"strings"
	"testing"
)

// sampleFrames holds, for every frame type, its zero value and one with
// every field set. Empty slices are nil, as the decoder returns them.
func sampleFrames() []Frame {
	return []Frame{
		&Hello{},
		&Hello{Version: 1, Token: "s3cr\x00t\xff", ClientName: "pump-7 ✓"},
		&HelloOK{Version: 1},
		&HelloOK{Version: 1, ServerName: "edge-01", SessionID: 1 << 60, MaxFrame: DefaultMaxFrame, HeartbeatMillis: 5000},
		&Error{Code: CodeInternal},
		&Error{Corr: 42, Code: CodeQueueFull, Message: "queue clicks is full (10000 messages)"},
		&Error{Corr: 43, Code: CodeServedElsewhere, Message: "queue clicks is served by node n2"},
		&Heartbeat{},
		&Goodbye{},
		&Goodbye{Reason: "shutting down"},
		&Declare{},
		&Declare{Corr: 1, Queue: "clicks", Durability: DurabilityBuffered, Partitions: 4, DeadLetter: "clicks.dlq",
			MaxDeliveries: 5, AckDeadlineMillis: 30000, MaxBytes: 1 << 40, MaxMessages: 1e9,
			Overflow: OverflowDropOldest, DedupeWindowMillis: 120000},
		&Declared{Durability: DurabilityDurable},
		&Declared{Corr: 1, Queue: "clicks", Durability: DurabilityBuffered, Partitions: 4, Created: true,
			Warning: "Buffered queues confirm and deliver without waiting for fsync."},
		&Publish{},
		&Publish{Corr: 7, Queue: "clicks", MessageID: "m-\x00\xfe", Key: "device-9",
			Headers: []Header{{"content-type", "application/json"}, {"", ""}, {"bin", "\xff\x00"}},
			Body:    []byte(`{"x":1}`)},
		&Confirm{},
		&Confirm{Corr: 7, Partition: 3, Offset: 1<<64 - 1, Duplicate: true},
		&Confirm{Corr: 8, Durability: DurabilityBuffered},
		&SetMode{Durability: DurabilityDurable},
		&SetMode{Corr: 3, Queue: "clicks", Durability: DurabilityBuffered},
		&QueueInfo{},
		&QueueInfo{Corr: 4, Queue: "clicks"},
		&QueueInfoReply{Durability: DurabilityDurable},
		&QueueInfoReply{Corr: 4, Queue: "clicks", Durability: DurabilityBuffered, Ready: 7, InFlight: 2, Bytes: 1 << 33,
			Consumers: 3, Unavailable: "partition 1: latched",
			Partitions: []PartitionFrontiers{{WrittenNext: 10, DurableNext: 8}, {WrittenNext: 1<<64 - 1, DurableNext: 0}}},
		&PurgeQueue{},
		&PurgeQueue{Corr: 5, Queue: "clicks"},
		&Purged{},
		&Purged{Corr: 5, Queue: "clicks", Purged: 1 << 40},
		&DeleteQueue{},
		&DeleteQueue{Corr: 6, Queue: "clicks", IfEmpty: true},
		&Deleted{},
		&Deleted{Corr: 6, Queue: "clicks"},
		&Subscribe{},
		&Subscribe{Corr: 8, SubID: 2, Queue: "clicks", Prefetch: 256},
		&Subscribed{},
		&Subscribed{Corr: 8, SubID: 2, Partitions: 4},
		&Unsubscribe{},
		&Unsubscribe{Corr: 9, SubID: 2},
		&Unsubscribed{},
		&Unsubscribed{Corr: 9, SubID: 2},
		&Credit{},
		&Credit{SubID: 2, Credit: 1 << 31},
		&Deliver{},
		&Deliver{SubID: 2, Tag: 99, Partition: 1, Offset: 12345, Incarnation: 3, Deliveries: 1, MessageID: "m-1",
			Key: "device-\xff", Headers: []Header{{"k", "v"}}, Body: bytes.Repeat([]byte{0xab}, 300)},
		&Ack{},
		&Ack{SubID: 2, Tags: []uint64{1, 2, 1 << 63}},
		&Nack{},
		&Nack{SubID: 2, Tags: []uint64{5}, Requeue: true},
		&Nack{SubID: 2, Tags: []uint64{5, 6}, Requeue: true, DelayMillis: 500},
		&Extend{},
		&Extend{SubID: 2, Tags: []uint64{1, 1 << 63}},
		&SettleError{Code: CodeStaleTag},
		&SettleError{SubID: 2, Tag: 5, Code: CodeStaleTag, Message: "tag 5 is not held by subscription 2"},
	}
}

// allTypes lists every known frame type.
func allTypes() []FrameType {
	var ts []FrameType
	for t := range 256 {
		if FrameType(t).Known() {
			ts = append(ts, FrameType(t))
		}
	}
	return ts
}

// Body builders for hand-made frames.
func u8(v uint8) []byte   { return []byte{v} }
func u16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
func str(s string) []byte { return append(u16(uint16(len(s))), s...) }

// raw builds a frame with the right length around the given body parts.
func raw(t FrameType, parts ...[]byte) []byte {
	body := bytes.Join(parts, nil)
	return append(append(u32(uint32(len(body)+1)), byte(t)), body...)
}

func mustEncode(t testing.TB, f Frame) []byte {
	t.Helper()
	b, err := AppendFrame(nil, f)
	if err != nil {
		t.Fatalf("encode %v: %v", f, err)
	}
	return b
}

// readAll reads frames until the first error and returns both.
func readAll(r *Reader) ([]Frame, error) {
	var frames []Frame
	for {
		f, err := r.ReadFrame()
		if err != nil {
			return frames, err
		}
		frames = append(frames, f)
	}
}

// heapAllocs is the total of bytes ever allocated on the heap. Small
// allocations are counted when a cached span is handed back, so readings
// are off by up to a few hundred KiB; large ones are counted at once.
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// repeatReader returns the same bytes forever.
type repeatReader struct {
	data []byte
	off  int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k := copy(p[n:], r.data[r.off:])
		n += k
		r.off = (r.off + k) % len(r.data)
	}
	return n, nil
}

// errWriter fails every write.
type errWriter struct{ err error }

func (w errWriter) Write([]byte) (int, error) { return 0, w.err }

var longString = strings.Repeat("x", MaxStringLen+1)
