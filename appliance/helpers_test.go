package appliance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func openBroker(t testing.TB, fs vfs.FS, dir string, opts Options) *Broker {
	t.Helper()
	opts.FS, opts.DataDir = fs, dir
	if opts.MinFreeBytes == 0 {
		opts.MinFreeBytes = -1
	}
	b, err := Open(opts)
	if err != nil {
		t.Fatalf("open broker: %v", err)
	}
	return b
}

// collector gathers deliveries from a subscription.
type collector struct {
	ch chan Delivery
}

func newCollector() *collector { return &collector{ch: make(chan Delivery, 1<<16)} }

func (c *collector) deliver(d Delivery) { c.ch <- d }

// next waits for one delivery.
func (c *collector) next(t testing.TB, ctx context.Context) Delivery {
	t.Helper()
	select {
	case d := <-c.ch:
		return d
	case <-ctx.Done():
		t.Fatalf("no delivery: %v", ctx.Err())
		return Delivery{}
	}
}

// none asserts that nothing is delivered while the broker settles: it
// checks the channel after the partition dispatchers are idle.
func (c *collector) empty() bool { return len(c.ch) == 0 }

func body(i int) []byte { return []byte(fmt.Sprintf("message-%06d", i)) }
