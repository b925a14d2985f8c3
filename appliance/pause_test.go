package appliance

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A paused subscription takes no new deliveries, whatever its credit: the
// queue hands them to the others. What it holds stays its own to settle,
// and Resume lets it take deliveries again.
func TestPausedSubscriptionGetsNothing(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{Logger: quietLogger()})
	defer b.Close()
	declare(t, ctx, b, QueueConfig{Name: "q"})
	slow, slowC := subscribe(t, b, "q", 100)
	publish(t, ctx, b, "q", Message{Body: body(0)})
	held := slowC.next(t, ctx)
	slow.Pause()

	fast, fastC := subscribe(t, b, "q", 100)
	defer fast.Close()
	for i := 1; i <= 20; i++ {
		publish(t, ctx, b, "q", Message{Body: body(i)})
	}
	for range 20 {
		if err := fast.Ack(fastC.next(t, ctx).Tag); err != nil {
			t.Fatal(err)
		}
	}
	if !slowC.empty() {
		t.Fatalf("a paused subscription was handed %d deliveries", len(slowC.ch))
	}
	if err := slow.Ack(held.Tag); err != nil {
		t.Fatalf("a paused subscription could not settle what it held: %v", err)
	}

	fast.Close()
	publish(t, ctx, b, "q", Message{Body: body(21)})
	slow.Resume()
	if d := slowC.next(t, ctx); string(d.Body) != string(body(21)) {
		t.Fatalf("after Resume the subscription got %q", d.Body)
	}
	slow.Close()
}
