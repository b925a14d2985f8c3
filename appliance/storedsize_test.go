package appliance

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// bigHeaders is n headers holding about size bytes in all.
func bigHeaders(n, size int) []Header {
	hs := make([]Header, n)
	for i := range hs {
		hs[i] = Header{Key: fmt.Sprintf("h%03d", i), Value: strings.Repeat("v", size/n-4)}
	}
	return hs
}

// A queue's max_bytes counts what each message stores, body, headers and
// id, not the body alone: messages with tiny bodies and 64 KiB of headers
// fill a 1 MiB queue after 16 of them. Under reject the next publish is
// refused as queue full; under drop-oldest the oldest make room and the
// queue stays within its limit. The bytes reported are the same figure.
func TestMaxBytesCountsHeadersAndID(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{Logger: quietLogger()})
	defer b.Close()
	const limit = 1 << 20
	headers := bigHeaders(16, 64<<10)
	msg := func(i int) Message {
		return Message{ID: fmt.Sprintf("id-%04d", i), Headers: headers, Body: []byte("b")}
	}
	each := storedSize(msg(0).ID, "", headers, msg(0).Body)
	if each < 64<<10-64 || each > 64<<10+16 {
		t.Fatalf("a message stores %d bytes, want about 64 KiB", each)
	}
	fit := int(limit / each)

	declare(t, ctx, b, QueueConfig{Name: "reject", MaxBytes: limit})
	for i := range fit {
		publish(t, ctx, b, "reject", msg(i))
	}
	_, err := b.Publish(ctx, "reject", msg(fit))
	if !errors.Is(err, ErrQueueFull) {
		t.Fatalf("publish %d of %d-byte messages to a %d-byte queue: %v, want queue full", fit+1, each, limit, err)
	}
	in := info(t, b, "reject")
	if in.Messages != int64(fit) || in.Bytes != int64(fit)*each || in.Bytes > limit {
		t.Fatalf("queue holds %d messages, %d bytes; want %d and %d (at most %d)", in.Messages, in.Bytes, fit, int64(fit)*each, limit)
	}
	if in.Counters.RejectedFull != 1 {
		t.Fatalf("rejected full = %d, want 1", in.Counters.RejectedFull)
	}

	declare(t, ctx, b, QueueConfig{Name: "drop", MaxBytes: limit, Overflow: OverflowDropOldest})
	for i := range 3 * fit {
		publish(t, ctx, b, "drop", msg(i))
	}
	waitFor(t, ctx, "drop-oldest discards to apply", func() bool { return info(t, b, "drop").Bytes <= limit })
	in = info(t, b, "drop")
	if in.Messages == 0 || in.Messages > int64(fit) || in.Counters.DroppedOverflow < int64(2*fit) {
		t.Fatalf("drop-oldest queue holds %d messages (%d bytes) after %d publishes, dropped %d; want at most %d held",
			in.Messages, in.Bytes, 3*fit, in.Counters.DroppedOverflow, fit)
	}
	// The newest is kept.
	s, c := subscribe(t, b, "drop", 3*fit)
	defer s.Close()
	var last Delivery
	for range in.Messages {
		last = c.next(t, ctx)
	}
	if want := fmt.Sprintf("id-%04d", 3*fit-1); last.MessageID != want {
		t.Fatalf("last message kept is %q, want %q", last.MessageID, want)
	}

	// One message whose headers alone pass max_bytes is refused under
	// drop-oldest too: nothing could make room for it.
	declare(t, ctx, b, QueueConfig{Name: "small", MaxBytes: 64 << 10, Overflow: OverflowDropOldest})
	if _, err := b.Publish(ctx, "small", Message{Headers: bigHeaders(2, 128<<10), Body: []byte("b")}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("a message of 128 KiB of headers in a 64 KiB queue: %v, want queue full", err)
	}
}

// The bytes a queue reports come back the same after a restart: the
// snapshot keeps each message's stored size, and a replay counts it
// the same way.
func TestStoredBytesSurviveRestart(t *testing.T) {
	ctx := testCtx(t)
	fs := vfs.NewMem()
	b := openBroker(t, fs, "data", Options{Logger: quietLogger()})
	declare(t, ctx, b, QueueConfig{Name: "q", MaxBytes: 1 << 20})
	m := Message{ID: "one", Headers: []Header{{Key: "k", Value: string(bytes.Repeat([]byte("v"), 1000))}}, Body: []byte("body")}
	publish(t, ctx, b, "q", m)
	if err := b.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	m.ID = "two" // after the snapshot: replayed from the log
	publish(t, ctx, b, "q", m)
	want := 2 * storedSize("one", "", m.Headers, m.Body)
	if got := info(t, b, "q").Bytes; got != want {
		t.Fatalf("bytes before restart %d, want %d", got, want)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openBroker(t, fs, "data", Options{Logger: quietLogger()})
	defer b.Close()
	if got := info(t, b, "q").Bytes; got != want {
		t.Fatalf("bytes after restart %d, want %d", got, want)
	}
}

// Ids and headers past what a publish record's u16 lengths hold are
// refused, never cut short.
func TestPublishRefusesUnencodableMessages(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{Logger: quietLogger()})
	defer b.Close()
	declare(t, ctx, b, QueueConfig{Name: "q"})
	for name, m := range map[string]Message{
		"long id":           {ID: strings.Repeat("i", MaxMessageIDBytes+1)},
		"long header value": {Headers: []Header{{Key: "k", Value: strings.Repeat("v", MaxHeaderBytes+1)}}},
		"too many headers":  {Headers: make([]Header, MaxHeaders+1)},
	} {
		if _, err := b.Publish(ctx, "q", m); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}
	publish(t, ctx, b, "q", Message{ID: strings.Repeat("i", MaxMessageIDBytes)})
	if in := info(t, b, "q"); in.Messages != 1 || in.Bytes != MaxMessageIDBytes {
		t.Fatalf("after the longest id: %d messages, %d bytes", in.Messages, in.Bytes)
	}
}
