package appliance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/internal/syncprobe"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
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

// empty reports whether no delivery is waiting in the collector.
func (c *collector) empty() bool { return len(c.ch) == 0 }

func body(i int) []byte { return []byte(fmt.Sprintf("message-%06d", i)) }

// waitFor polls cond until it holds or ctx ends, for conditions that have
// no event to wait on (counters applied by another goroutine).
func waitFor(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	await.Until(t, ctx, what, cond)
}

// info returns a queue's view or fails the test.
func info(t testing.TB, b *Broker, name string) QueueInfo {
	t.Helper()
	in, err := b.QueueInfo(name)
	if err != nil {
		t.Fatalf("queue info %s: %v", name, err)
	}
	return in
}

// declare declares a queue or fails the test.
func declare(t testing.TB, ctx context.Context, b *Broker, c QueueConfig) DeclareResult {
	t.Helper()
	r, err := b.Declare(ctx, c)
	if err != nil {
		t.Fatalf("declare %s: %v", c.Name, err)
	}
	return r
}

// publish publishes a body and fails the test if it is not confirmed.
func publish(t testing.TB, ctx context.Context, b *Broker, queue string, m Message) Confirm {
	t.Helper()
	c, err := b.Publish(ctx, queue, m)
	if err != nil {
		t.Fatalf("publish to %s: %v", queue, err)
	}
	return c
}

// subscribe subscribes a collector or fails the test.
func subscribe(t testing.TB, b *Broker, queue string, prefetch int) (*Subscription, *collector) {
	t.Helper()
	c := newCollector()
	s, err := b.Subscribe(queue, SubscribeOptions{Prefetch: prefetch, Deliver: c.deliver})
	if err != nil {
		t.Fatalf("subscribe %s: %v", queue, err)
	}
	return s, c
}

// quiet waits until a queue has nothing in flight: no lease held and no
// settle still being appended.
func quiet(t testing.TB, ctx context.Context, b *Broker, queue string) QueueInfo {
	t.Helper()
	var in QueueInfo
	waitFor(t, ctx, queue+" with nothing in flight", func() bool {
		in = info(t, b, queue)
		return in.InFlight == 0
	})
	return in
}

// lockedBuffer is an io.Writer for a slog handler shared by goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// capturingLogger returns a logger that writes text lines to the buffer.
func capturingLogger() (*slog.Logger, *lockedBuffer) {
	buf := &lockedBuffer{}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// quietLogger drops everything.
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newSyncProbe counts every sync and gates those of segment files.
func newSyncProbe(fs vfs.FS) (*syncprobe.Probe, vfs.FS) {
	return syncprobe.New(fs, func(path string) bool { return strings.HasSuffix(path, ".seg") })
}

// newSyncProbeFor gates the syncs of the files match picks.
func newSyncProbeFor(fs vfs.FS, match func(path string) bool) (*syncprobe.Probe, vfs.FS) {
	return syncprobe.New(fs, match)
}

// segmentSyncFailures wraps fs so that every sync of a segment file fails
// while the returned switch is on.
func segmentSyncFailures(fs vfs.FS) (vfs.FS, *atomic.Bool) {
	var on atomic.Bool
	return errorfs.Wrap(fs, errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			if on.Load() && strings.HasSuffix(op.Path, ".seg") {
				return errors.New("injected sync failure")
			}
		}
		return nil
	})), &on
}
