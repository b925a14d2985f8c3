package appliance

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// An idle broker makes no syncs and no disk writes: background sync,
// checkpoints and lease timers run only while there is work.
func TestIdleBrokerTouchesNoDisk(t *testing.T) {
	ctx := testCtx(t)
	var ops atomic.Int64
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo,
			errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpCreate, errorfs.OpRename, errorfs.OpRemove:
			ops.Add(1)
		}
		return nil
	}))
	b := openBroker(t, fs, "data", Options{CheckpointDelay: 20 * time.Millisecond})
	defer b.Close()
	for _, mode := range []Durability{Durable, Buffered} {
		name := "idle-" + mode.String()
		if _, err := b.Declare(ctx, QueueConfig{Name: name, Durability: mode, AckDeadline: 50 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 50; i++ {
			if _, err := b.Publish(ctx, name, Message{Body: body(i)}); err != nil {
				t.Fatal(err)
			}
		}
		// Lease one message and let its lease expire, so the lease timer
		// has run and must have stopped again.
		c := newCollector()
		sub, err := b.Subscribe(name, SubscribeOptions{Prefetch: 1, Deliver: c.deliver})
		if err != nil {
			t.Fatal(err)
		}
		c.next(t, ctx)
		sub.Close()
	}
	// Wait until the work is done: every partition synced and checkpointed.
	settled := func() bool {
		b.ckptMu.Lock()
		pending := len(b.ckptDirty) > 0 || b.ckptTimer != nil
		b.ckptMu.Unlock()
		if pending {
			return false
		}
		for _, name := range b.QueueNames() {
			info, err := b.QueueInfo(name)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range info.Partitions {
				if p.UnsyncedRecords > 0 || p.SyncPending {
					return false
				}
			}
		}
		return true
	}
	waitFor(t, ctx, "the broker to settle", settled)
	before := ops.Load()
	select { // an observation window, not a synchronisation
	case <-time.After(time.Second):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if after := ops.Load(); after != before {
		t.Fatalf("idle broker did %d disk operations in a second", after-before)
	}
}
