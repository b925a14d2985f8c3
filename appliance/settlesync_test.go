package appliance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Settles that end a message on a solo durable queue ask for no sync of
// their own: one publisher and one consumer in lockstep, with no
// background sync to help, cost one segment sync per message (each
// publish's sync covers the ack before it), not two; the acks are applied
// once synced all the same, and a queue full of acked messages has them
// synced at once rather than refusing publishes until a sync comes by.
func TestDurableAcksShareThePublishSync(t *testing.T) {
	ctx := testCtx(t)
	probe, fs := newSyncProbe(vfs.NewMem())
	b := openBroker(t, fs, "data", Options{})
	defer b.Close()
	s := b.Settings()
	s.BackgroundSyncIntervalMs = 60000 // no background sync within the test
	if err := b.UpdateSettings(s); err != nil {
		t.Fatal(err)
	}
	declare(t, ctx, b, QueueConfig{Name: "d", Durability: Durable})
	sub, got := subscribe(t, b, "d", 1)
	defer sub.Close()

	const rounds = 50
	before := probe.Matched.Load()
	for i := range rounds {
		publish(t, ctx, b, "d", Message{Body: body(i)})
		d := got.next(t, ctx)
		if string(d.Body) != string(body(i)) {
			t.Fatalf("round %d: delivered %q", i, d.Body)
		}
		if err := sub.Ack(d.Tag); err != nil {
			t.Fatal(err)
		}
	}
	if n := probe.Matched.Load() - before; n > rounds+1 {
		t.Fatalf("%d segment syncs for %d publishes and %d acks, want at most %d", n, rounds, rounds, rounds+1)
	}
	// The last ack waits for a sync: until then its message is settling.
	if in := info(t, b, "d"); in.Counters.Acked != rounds || in.Messages != 1 {
		t.Fatalf("after %d acks, the last unsynced: acked %d, messages %d; want %d, 1", rounds, in.Counters.Acked, in.Messages, rounds)
	}

	// A full queue syncs its settles when it refuses a publish.
	declare(t, ctx, b, QueueConfig{Name: "full", Durability: Durable, MaxMessages: 1, Overflow: OverflowReject})
	fsub, fgot := subscribe(t, b, "full", 1)
	defer fsub.Close()
	publish(t, ctx, b, "full", Message{Body: body(0)})
	if err := fsub.Ack(fgot.next(t, ctx).Tag); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Second) // well inside the 60 s interval
	defer cancel()
	for {
		_, err := b.Publish(short, "full", Message{Body: body(1)})
		if err == nil {
			break
		}
		if !errors.Is(err, ErrQueueFull) {
			t.Fatalf("publish to a queue whose one message was acked: %v", err)
		}
		select {
		case <-short.Done():
			t.Fatal("a queue full of an acked message kept refusing publishes: its ack was never synced")
		case <-time.After(time.Millisecond):
		}
	}

	// With no background sync at all, a settle syncs at once.
	s.BackgroundSyncIntervalMs = 0
	if err := b.UpdateSettings(s); err != nil {
		t.Fatal(err)
	}
	if in := quiet(t, ctx, b, "d"); in.Messages != 0 {
		t.Fatalf("with background sync off, the last ack still unapplied: %d messages", in.Messages)
	}
}
