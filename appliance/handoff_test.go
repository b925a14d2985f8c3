package appliance

import (
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A lone buffered publish to a quiet solo partition crosses no goroutine
// before its confirm: the publisher's goroutine writes it (the log's
// writer is idle), applies it (nothing else waits to be applied) and runs
// its callback, so the callback has run when PublishAsync returns. A
// durable one waits for its sync, which another goroutine completes.
func TestLonePublishCrossesNoGoroutine(t *testing.T) {
	ctx := testCtx(t)
	for _, coalesce := range []string{"gap", "window"} {
		t.Run(coalesce, func(t *testing.T) {
			probe, fs := newSyncProbe(vfs.NewMem())
			b := openBroker(t, fs, "data", Options{})
			defer b.Close()
			s := b.Settings()
			s.BackgroundSyncIntervalMs = 0 // nothing else wakes the log's writer
			s.BufferedCoalesce = coalesce
			if err := b.UpdateSettings(s); err != nil {
				t.Fatal(err)
			}
			declare(t, ctx, b, QueueConfig{Name: "b", Durability: Buffered})
			declare(t, ctx, b, QueueConfig{Name: "d", Durability: Durable})
			inline := func(queue string, i int) bool {
				var returned, early atomic.Bool
				done := make(chan error, 1)
				b.PublishAsync(queue, Message{Body: body(i)}, func(_ Confirm, err error) {
					early.Store(!returned.Load())
					done <- err
				})
				returned.Store(true)
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("publish %d to %s: %v", i, queue, err)
					}
				case <-ctx.Done():
					t.Fatalf("publish %d to %s: no confirm", i, queue)
				}
				return early.Load()
			}
			const n = 50
			for i := range n {
				if !inline("b", i) {
					t.Fatalf("buffered publish %d of %d was confirmed on another goroutine", i, n)
				}
			}
			// The durable publish's segment sync is held until PublishAsync
			// has returned: its callback must not have run by then.
			probe.Shut()
			var called atomic.Bool
			done := make(chan error, 1)
			b.PublishAsync("d", Message{Body: body(0)}, func(_ Confirm, err error) {
				called.Store(true)
				done <- err
			})
			if called.Load() {
				t.Fatal("a durable publish was confirmed before its sync could complete")
			}
			probe.Open()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("durable publish: %v", err)
				}
			case <-ctx.Done():
				t.Fatal("durable publish: no confirm")
			}
		})
	}
}
