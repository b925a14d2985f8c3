package appliance

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestIncarnationAfterPowerCut: a solo buffered queue delivers a message
// that is not synced yet; a power cut drops it and the queue is cut back to
// its last sync, so the next publish takes the same offset. The two
// deliveries of that offset carry different incarnations, and a clean
// restart keeps the incarnation.
func TestIncarnationAfterPowerCut(t *testing.T) {
	ctx := testCtx(t)
	mem := vfs.NewCrashableMem()
	opts := Options{Logger: quietLogger(), CheckpointDelay: time.Hour}
	noSync := func(b *Broker) {
		t.Helper()
		s := DefaultSettings()
		s.BackgroundSyncIntervalMs = 0 // nothing syncs the log but a close
		if err := b.UpdateSettings(s); err != nil {
			t.Fatal(err)
		}
	}
	b := openBroker(t, mem, "data", opts)
	noSync(b)
	declare(t, ctx, b, QueueConfig{Name: "buf", Durability: Buffered})
	publish(t, ctx, b, "buf", Message{ID: "kept", Body: []byte("kept")})
	_, c := subscribe(t, b, "buf", 10)
	first := c.next(t, ctx)
	if err := b.Close(); err != nil { // synced, and closed cleanly
		t.Fatal(err)
	}

	b = openBroker(t, mem, "data", opts)
	noSync(b)
	_, c = subscribe(t, b, "buf", 10)
	kept := c.next(t, ctx) // never acked: delivered again
	if kept.MessageID != "kept" || kept.Incarnation != first.Incarnation {
		t.Fatalf("after a clean restart %q has incarnation %d, before it %d", kept.MessageID, kept.Incarnation, first.Incarnation)
	}
	lost := publish(t, ctx, b, "buf", Message{ID: "lost", Body: []byte("lost")})
	seen := c.next(t, ctx)
	if seen.MessageID != "lost" || seen.Offset != lost.Offset {
		t.Fatalf("delivered %q at offset %d, want the unsynced message at %d", seen.MessageID, seen.Offset, lost.Offset)
	}
	if seen.Incarnation != kept.Incarnation {
		t.Fatalf("one run of the log delivered incarnations %d and %d", kept.Incarnation, seen.Incarnation)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = openBroker(t, crashed, "data", opts)
	defer b.Close()
	reused := publish(t, ctx, b, "buf", Message{ID: "new", Body: []byte("new")})
	if reused.Offset != lost.Offset {
		t.Fatalf("after the power cut the next publish took offset %d, want the lost one's %d", reused.Offset, lost.Offset)
	}
	_, c = subscribe(t, b, "buf", 10)
	for range 2 {
		d := c.next(t, ctx)
		if d.Offset != lost.Offset {
			continue // the kept message, delivered again
		}
		if d.MessageID != "new" {
			t.Fatalf("offset %d delivered %q after the cut, want the new message", d.Offset, d.MessageID)
		}
		if d.Incarnation == seen.Incarnation {
			t.Fatalf("offset %d delivered %q and then %q under one incarnation, %d", d.Offset, seen.MessageID, d.MessageID, d.Incarnation)
		}
		return
	}
	t.Fatal("the new message was not delivered")
}
