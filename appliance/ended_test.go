package appliance

import (
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A subscription learns that the broker ended it: deleting its queue calls
// Ended once; closing it first, or closing the broker, does not.
func TestSubscriptionEndedByDelete(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{})
	declare(t, ctx, b, QueueConfig{Name: "q"})
	declare(t, ctx, b, QueueConfig{Name: "kept"})
	var ended, closedFirst, onKept atomic.Int32
	c := newCollector()
	if _, err := b.Subscribe("q", SubscribeOptions{Deliver: c.deliver, Ended: func() { ended.Add(1) }}); err != nil {
		t.Fatal(err)
	}
	s, err := b.Subscribe("q", SubscribeOptions{Deliver: c.deliver, Ended: func() { closedFirst.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := b.Subscribe("kept", SubscribeOptions{Deliver: c.deliver, Ended: func() { onKept.Add(1) }}); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if ended.Load() != 1 || closedFirst.Load() != 0 || onKept.Load() != 0 {
		t.Fatalf("Ended calls: %d on the deleted queue's subscription (want 1), %d on one closed before (want 0), %d at broker close (want 0)",
			ended.Load(), closedFirst.Load(), onKept.Load())
	}
}
