package appliance

import (
	"context"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Settles that end a message on a solo durable queue ask for no sync of
// their own: one publisher and one consumer in lockstep, with no
// background sync to help, cost one segment sync per message (each
// publish's sync covers the ack before it), not two; the acks are applied
// once synced all the same. A queue with limits keeps a sync for each ack.
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

	// A queue with limits syncs its acks at once: an acked message
	// counts against them until its ack applies, and drop-oldest must
	// not drop a message nobody read in its place.
	declare(t, ctx, b, QueueConfig{Name: "limited", Durability: Durable, MaxMessages: 2, Overflow: OverflowDropOldest})
	publish(t, ctx, b, "limited", Message{Body: body(0)})
	publish(t, ctx, b, "limited", Message{Body: body(1)})
	lsub, lgot := subscribe(t, b, "limited", 1)
	if err := lsub.Ack(lgot.next(t, ctx).Tag); err != nil {
		t.Fatal(err)
	}
	lsub.Close()                                              // message 1, if leased meanwhile, is ready again
	short, cancel := context.WithTimeout(ctx, 20*time.Second) // well inside the 60 s interval
	defer cancel()
	waitFor(t, short, "the ack on the limited queue applied", func() bool { return info(t, b, "limited").Messages == 1 })
	publish(t, ctx, b, "limited", Message{Body: body(2)})
	if in := info(t, b, "limited"); in.Counters.DroppedOverflow != 0 || in.Messages != 2 {
		t.Fatalf("a publish after the ack dropped %d messages (%d left): the acked one still counted", in.Counters.DroppedOverflow, in.Messages)
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

// Limits added by a re-declare to a durable queue whose acks went out
// without a sync of their own: the acks are synced and applied then, as a
// limited queue's are, so the acked message stops counting against the
// limits (the background sync here would come only after a minute).
func TestLimitsAddedApplyTheAcksWaitingForASync(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{})
	defer b.Close()
	s := b.Settings()
	s.BackgroundSyncIntervalMs = 60000
	if err := b.UpdateSettings(s); err != nil {
		t.Fatal(err)
	}
	declare(t, ctx, b, QueueConfig{Name: "d", Durability: Durable, Partitions: 1})
	publish(t, ctx, b, "d", Message{Body: body(0)})
	publish(t, ctx, b, "d", Message{Body: body(1)})
	sub, got := subscribe(t, b, "d", 1)
	if err := sub.Ack(got.next(t, ctx).Tag); err != nil {
		t.Fatal(err)
	}
	sub.Close()
	if in := info(t, b, "d"); in.Messages != 2 {
		t.Fatalf("before the limits: %d messages, want the acked one still counted (its ack waits for a sync)", in.Messages)
	}
	declare(t, ctx, b, QueueConfig{Name: "d", MaxMessages: 2, Overflow: OverflowDropOldest})
	soon, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	waitFor(t, soon, "the ack applied once the queue has limits", func() bool { return info(t, b, "d").Messages == 1 })
	publish(t, ctx, b, "d", Message{Body: body(2)})
	if in := info(t, b, "d"); in.Counters.DroppedOverflow != 0 || in.Messages != 2 {
		t.Fatalf("a publish under a limit of 2 with one unread message: dropped %d, %d messages; want none dropped, 2",
			in.Counters.DroppedOverflow, in.Messages)
	}
}
