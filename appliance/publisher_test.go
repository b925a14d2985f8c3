package appliance

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// segmentWrites wraps fs and counts the writes to log segments.
func segmentWrites(fs vfs.FS) (*atomic.Int64, vfs.FS) {
	n := new(atomic.Int64)
	return n, errorfs.Wrap(fs, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if (op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt) && strings.HasSuffix(op.Path, ".seg") {
			n.Add(1)
		}
		return nil
	}))
}

// confirms collects a Publisher's confirms.
type confirms chan Confirm

func (c confirms) done(t *testing.T) func(Confirm, error) {
	return func(cf Confirm, err error) {
		if err != nil {
			t.Error(err)
		}
		c <- cf
	}
}

// take waits for n confirms and returns them in the order they came.
func (c confirms) take(t *testing.T, n int) []Confirm {
	t.Helper()
	deadline := time.After(30 * time.Second)
	out := make([]Confirm, 0, n)
	for len(out) < n {
		select {
		case cf := <-c:
			out = append(out, cf)
		case <-deadline:
			t.Fatalf("%d of %d confirms", len(out), n)
		}
	}
	return out
}

// wait takes n confirms and fails unless their offsets run from first one
// by one.
func (c confirms) wait(t *testing.T, n int, first uint64) {
	t.Helper()
	for i, cf := range c.take(t, n) {
		if cf.Offset != first+uint64(i) {
			t.Fatalf("confirm %d at offset %d, want %d", i, cf.Offset, first+uint64(i))
		}
	}
}

// The publishes a Publisher holds are written by nothing until Flush, which
// appends them together: one write to the log for all of them.
func TestPublisherHoldsUntilFlush(t *testing.T) {
	for _, mode := range []Durability{Buffered, Durable} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := testCtx(t)
			writes, fs := segmentWrites(vfs.NewMem())
			b := openBroker(t, fs, "data", Options{CheckpointDelay: time.Hour})
			defer b.Close()
			declare(t, ctx, b, QueueConfig{Name: "q", Durability: mode})
			before := writes.Load()
			pub := b.NewPublisher()
			got := make(confirms, 64)
			const n = 20
			for i := range n {
				pub.PublishAsync("q", Message{Body: body(i)}, got.done(t))
			}
			if len(got) != 0 || writes.Load() != before {
				t.Fatalf("before Flush: %d confirms and %d segment writes, want none", len(got), writes.Load()-before)
			}
			pub.Flush()
			got.wait(t, n, 0)
			if w := writes.Load() - before; w != 1 {
				t.Fatalf("%d publishes flushed together took %d segment writes, want 1", n, w)
			}
			c := newCollector()
			sub, err := b.Subscribe("q", SubscribeOptions{Prefetch: n, Deliver: c.deliver})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			for i := range n {
				if d := c.next(t, ctx); string(d.Body) != string(body(i)) {
					t.Fatalf("delivery %d is %q, want %q", i, d.Body, body(i))
				}
			}
		})
	}
}

// A Publisher holds at most maxHeld publishes: the one that reaches it
// starts their append without a Flush.
func TestPublisherFlushesAtItsBound(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{CheckpointDelay: time.Hour})
	defer b.Close()
	declare(t, ctx, b, QueueConfig{Name: "q", Durability: Buffered})
	pub := b.NewPublisher()
	got := make(confirms, maxHeld)
	for i := range maxHeld - 1 {
		pub.PublishAsync("q", Message{Body: body(i)}, got.done(t))
	}
	if len(got) != 0 {
		t.Fatalf("%d confirms before the bound", len(got))
	}
	pub.PublishAsync("q", Message{Body: body(maxHeld)}, got.done(t))
	got.wait(t, maxHeld, 0)
}

// A publish to a queue with limits is never held, and flushes what the
// Publisher holds first: under drop-oldest its admission waits for the
// publishes ahead of it to be applied.
func TestPublisherDoesNotHoldForALimitedQueue(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{CheckpointDelay: time.Hour})
	defer b.Close()
	declare(t, ctx, b, QueueConfig{Name: "free", Durability: Buffered})
	declare(t, ctx, b, QueueConfig{Name: "capped", Durability: Buffered, MaxMessages: 2, Overflow: OverflowDropOldest})
	pub := b.NewPublisher()
	free, capped := make(confirms, 8), make(confirms, 8)
	for i := range 3 {
		pub.PublishAsync("free", Message{Body: body(i)}, free.done(t))
	}
	for i := range 5 { // two fit; each later one drops the oldest, once the ones ahead are applied
		pub.PublishAsync("capped", Message{Body: body(i)}, capped.done(t))
	}
	free.wait(t, 3, 0)
	capped.take(t, 5) // the discards take offsets between them
	if in := info(t, b, "capped"); in.Messages != 2 {
		t.Fatalf("capped queue holds %d messages, want 2", in.Messages)
	}
}

// A Publisher that must wait for room in one partition (its pending
// batches at their bound behind an append stuck in the disk) first starts
// the appends it holds for others: they must not wait for that partition.
func TestPublisherFlushesBeforeItWaits(t *testing.T) {
	ctx := testCtx(t)
	var armed atomic.Bool
	gate := make(chan struct{})
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if armed.Load() && (op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt) &&
			strings.Contains(op.Path, "/queues/stuck/") && strings.HasSuffix(op.Path, ".seg") {
			<-gate
		}
		return nil
	}))
	b := openBroker(t, fs, "data", Options{CheckpointDelay: time.Hour})
	defer b.Close()
	declare(t, ctx, b, QueueConfig{Name: "free", Durability: Buffered})
	declare(t, ctx, b, QueueConfig{Name: "stuck", Durability: Buffered})
	armed.Store(true)
	stuck := make(confirms, 4*maxPublishBatch+2)
	go b.PublishAsync("stuck", Message{Body: body(0)}, stuck.done(t)) // its append waits at the gate
	waitFor(t, ctx, "the first append to wait in the disk", func() bool {
		q, err := b.queue("stuck")
		if err != nil {
			return false
		}
		p := q.parts[0]
		p.batch.mu.Lock()
		defer p.batch.mu.Unlock()
		return p.batch.flushing && len(p.batch.pending) == 0
	})
	for i := range 4 * maxPublishBatch { // the pending bound, behind it
		b.PublishAsync("stuck", Message{Body: body(i + 1)}, stuck.done(t))
	}

	pub := b.NewPublisher()
	free := make(confirms, 1)
	pub.PublishAsync("free", Message{Body: body(0)}, free.done(t))
	go pub.PublishAsync("stuck", Message{Body: body(-1)}, stuck.done(t)) // waits for room
	select {
	case <-free:
	case <-time.After(20 * time.Second):
		close(gate)
		t.Fatal("a held publish waited for another partition's room")
	}
	close(gate)
	stuck.take(t, 4*maxPublishBatch+2)
}
