package appliance

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fibril-edge/fibril/internal/await"
)

// TestCloseDuringCheckpoint closes the broker while a checkpoint is storing
// its snapshot (the metadata store's WAL sync held at a gate). Both finish
// without error once the sync goes through, and the snapshot is what the
// next start recovers from.
func TestCloseDuringCheckpoint(t *testing.T) {
	ctx := testCtx(t)
	mem := vfs.NewMem()
	probe, fs := newSyncProbeFor(mem, func(path string) bool {
		return strings.Contains(path, "meta") && strings.HasSuffix(path, ".log")
	})
	b := openBroker(t, fs, "data", Options{Logger: quietLogger()})
	declare(t, ctx, b, QueueConfig{Name: "q", DedupeWindow: time.Hour})
	publish(t, ctx, b, "q", Message{ID: "a", Body: body(1)})

	probe.Shut()
	ckpt := make(chan error, 1)
	go func() { ckpt <- b.Checkpoint(ctx) }()
	select {
	case <-probe.Held: // the snapshot write waits for its sync
	case <-ctx.Done():
		t.Fatal("the checkpoint never stored its snapshot")
	}
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	probe.Open()
	if err := <-ckpt; err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("close: %v", err)
	}

	b = openBroker(t, mem, "data", Options{Logger: quietLogger()})
	defer b.Close()
	if in := info(t, b, "q"); in.Messages != 1 {
		t.Fatalf("%d messages after the restart", in.Messages)
	}
	if c := publish(t, ctx, b, "q", Message{ID: "a", Body: body(1)}); !c.Duplicate {
		t.Fatalf("dedupe window lost: %+v", c)
	}
}

// A checkpoint pass, and a Close, do not take the partitions one after
// another. With the first snapshot's sync held at a gate, every other
// partition still captures its state (and its snapshot joins the same
// metadata sync); after the gate opens the pass ends without error and a
// restart recovers every partition from what it stored.
func TestCheckpointPassRunsPartitionsTogether(t *testing.T) {
	checkpointsTogether(t, func(ctx context.Context, b *Broker) error {
		if err := b.Checkpoint(ctx); err != nil {
			return err
		}
		return b.Close()
	})
}

func TestCloseCheckpointsQueuesTogether(t *testing.T) {
	checkpointsTogether(t, func(_ context.Context, b *Broker) error { return b.Close() })
}

// checkpointsTogether runs pass, which must checkpoint and close b, on
// eight dirty queues with the metadata store's syncs held at a gate.
func checkpointsTogether(t *testing.T, pass func(context.Context, *Broker) error) {
	ctx := testCtx(t)
	mem := vfs.NewMem()
	probe, fs := newSyncProbeFor(mem, func(path string) bool {
		return strings.Contains(path, "meta") && strings.HasSuffix(path, ".log")
	})
	const queues = 8
	b := openBroker(t, fs, "data", Options{Logger: quietLogger(), CheckpointDelay: time.Hour})
	var parts []*partition
	for i := range queues {
		name := fmt.Sprintf("q%d", i)
		declare(t, ctx, b, QueueConfig{Name: name, DedupeWindow: time.Hour})
		publish(t, ctx, b, name, Message{ID: "a", Body: body(i)})
		parts = append(parts, b.queues[name].parts...)
	}

	probe.Shut()
	done := make(chan error, 1)
	go func() { done <- pass(ctx, b) }()
	select {
	case <-probe.Held: // one snapshot write waits for its sync
	case <-ctx.Done():
		t.Fatal("no snapshot was stored")
	}
	await.Until(t, ctx, "every partition captured while one snapshot's sync is held", func() bool {
		for _, p := range parts {
			if p.isDirty() {
				return false
			}
		}
		return true
	})
	probe.Open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	b = openBroker(t, mem, "data", Options{Logger: quietLogger()})
	defer b.Close()
	for i := range queues {
		name := fmt.Sprintf("q%d", i)
		if in := info(t, b, name); in.Messages != 1 {
			t.Fatalf("%s: %d messages after the restart", name, in.Messages)
		}
		if c := publish(t, ctx, b, name, Message{ID: "a", Body: body(i)}); !c.Duplicate {
			t.Fatalf("%s: dedupe window lost: %+v", name, c)
		}
	}
}
