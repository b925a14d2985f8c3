package appliance

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// countingObserver counts what the broker reports.
type countingObserver struct {
	mu                     sync.Mutex
	confirms, refusals     map[string]int
	deliveries, firstDeliv int
	syncs                  int
	modes                  map[Durability]bool
}

func newCountingObserver() *countingObserver {
	return &countingObserver{confirms: map[string]int{}, refusals: map[string]int{}, modes: map[Durability]bool{}}
}

func (o *countingObserver) Published(q string, mode Durability, took time.Duration, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.modes[mode] = true
	if err != nil {
		o.refusals[q]++
	} else {
		o.confirms[q]++
	}
}

func (o *countingObserver) Delivered(q string, mode Durability, deliveries uint32, since time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.deliveries++
	if deliveries == 1 {
		o.firstDeliv++
	}
}

func (o *countingObserver) Synced(q string, partition int, took time.Duration, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.syncs++
}

// TestObserverSeesPublishesDeliveriesAndSyncs publishes to a durable queue
// (each confirm waits for a sync), refuses one over the limit, and consumes.
func TestObserverSeesPublishesDeliveriesAndSyncs(t *testing.T) {
	ctx := testCtx(t)
	obs := newCountingObserver()
	b := openBroker(t, vfs.NewMem(), "data", Options{Observer: obs})
	defer b.Close()
	if _, err := b.Declare(ctx, QueueConfig{Name: "q", Durability: Durable, MaxMessages: 3}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		_, err := b.Publish(ctx, "q", Message{Body: body(i)})
		if i < 3 && err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if i == 3 && !errors.Is(err, ErrQueueFull) {
			t.Fatalf("publish over the limit: %v, want ErrQueueFull", err)
		}
	}
	c := newCollector()
	sub, err := b.Subscribe("q", SubscribeOptions{Deliver: c.deliver})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for range 3 {
		c.next(t, ctx)
	}
	waitFor(t, ctx, "three deliveries observed", func() bool {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		return obs.deliveries == 3
	})
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.confirms["q"] != 3 || obs.refusals["q"] != 1 || obs.firstDeliv != 3 || obs.syncs < 3 || !obs.modes[Durable] {
		t.Fatalf("observed confirms %v refusals %v first deliveries %d syncs %d modes %v",
			obs.confirms, obs.refusals, obs.firstDeliv, obs.syncs, obs.modes)
	}
}
