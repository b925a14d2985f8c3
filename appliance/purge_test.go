package appliance

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A purge discards the ready messages, leaves the delivered ones with
// their consumer, and holds across a restart; a queue that does not exist
// is ErrNotFound.
func TestPurge(t *testing.T) {
	ctx := testCtx(t)
	fs := vfs.NewMem()
	for _, mode := range []Durability{Durable, Buffered} {
		b := openBroker(t, fs, "data-"+mode.String(), Options{Logger: quietLogger()})
		declare(t, ctx, b, QueueConfig{Name: "q", Durability: mode, Partitions: 2})
		const n = 2500 // more than one append's worth in each partition
		for i := range n {
			publish(t, ctx, b, "q", Message{Body: body(i)})
		}
		sub, c := subscribe(t, b, "q", 3)
		var held []uint64
		for range 3 {
			held = append(held, c.next(t, ctx).Tag)
		}
		got, err := b.Purge(ctx, "q")
		if err != nil || got != n-3 {
			t.Fatalf("%s: purge: %d, %v; want %d", mode, got, err, n-3)
		}
		if in := info(t, b, "q"); in.Messages != 3 || in.InFlight != 3 || in.Counters.Purged != n-3 {
			t.Fatalf("%s after the purge: %d messages, %d in flight, purged %d; want 3, 3, %d", mode, in.Messages, in.InFlight, in.Counters.Purged, n-3)
		}
		if err := sub.Ack(held...); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, "the acks applied", func() bool { return info(t, b, "q").Messages == 0 })
		publish(t, ctx, b, "q", Message{Body: body(n)})
		if d := c.next(t, ctx); string(d.Body) != string(body(n)) {
			t.Fatalf("%s: after the purge the consumer got %q", mode, d.Body)
		}
		if _, err := b.Purge(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("purge of an unknown queue: %v", err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		b = openBroker(t, fs, "data-"+mode.String(), Options{Logger: quietLogger()})
		if in := info(t, b, "q"); in.Messages != 1 {
			t.Fatalf("%s after a restart: %d messages, want the one published after the purge (its delivery was never acked)", mode, in.Messages)
		}
		b.Close()
	}
}
