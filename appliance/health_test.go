package appliance

import (
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Healthy holds while the logs work and fails, for good, once a failed
// segment sync latches one.
func TestHealthyFailsWhenALogLatches(t *testing.T) {
	ctx := testCtx(t)
	fs, failSync := segmentSyncFailures(vfs.NewMem())
	b := openBroker(t, fs, "data", Options{Logger: quietLogger()})
	declare(t, ctx, b, QueueConfig{Name: "orders", Durability: Durable, Partitions: 2})
	publish(t, ctx, b, "orders", Message{Body: body(1)})
	if err := b.Healthy(); err != nil {
		t.Fatalf("Healthy before the failure: %v", err)
	}
	failSync.Store(true)
	for i := 0; i < 4; i++ { // round-robin: reach every partition
		if _, err := b.Publish(ctx, "orders", Message{Body: body(i)}); err == nil {
			t.Fatalf("publish %d succeeded with syncs failing", i)
		}
	}
	err := b.Healthy()
	if !errors.Is(err, ErrUnhealthy) || !strings.Contains(err.Error(), "latched") {
		t.Fatalf("Healthy after a failed sync = %v, want a latched log", err)
	}
	failSync.Store(false)
	if err := b.Healthy(); !errors.Is(err, ErrUnhealthy) {
		t.Fatalf("Healthy once syncs work again = %v; a latch lasts until reopen", err)
	}
	_ = b.Close()
	if err := b.Healthy(); !errors.Is(err, ErrUnhealthy) {
		t.Fatalf("Healthy after Close = %v", err)
	}
}
