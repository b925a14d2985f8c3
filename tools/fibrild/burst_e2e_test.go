package main

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
)

// Pipelined bursts against fibrild on its defaults: thousands of 16 KiB
// publishes and hundreds of 1 MiB ones, all in flight together, are
// slowed by the broker when it is behind, never refused; every one is
// confirmed at its own offset and the queue holds exactly that many.
func TestPipelinedBurstsAreNeverRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("runs fibrild and writes about 500 MB")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p := startSolo(t)
	c := dialClient(t, ctx, p)
	for _, tc := range []struct {
		queue string
		q     client.QueueConfig
		size  int
		n     int
	}{
		{"burst-16k-buffered", client.Queue("burst-16k-buffered").Buffered(), 16 << 10, 5000},
		{"burst-16k-durable", client.Queue("burst-16k-durable").Durable(), 16 << 10, 5000},
		{"burst-1m-buffered", client.Queue("burst-1m-buffered").Buffered(), 1 << 20, 400},
	} {
		if _, err := c.DeclareQueue(ctx, tc.q); err != nil {
			t.Fatal(err)
		}
		body := bytes.Repeat([]byte{'b'}, tc.size)
		futures := make([]*client.Future, tc.n)
		for i := range futures {
			futures[i] = c.PublishAsyncContext(ctx, tc.queue, client.Message{Body: body})
		}
		offsets := map[uint64]bool{}
		refused := 0
		var first error
		for _, f := range futures {
			cf, err := f.Wait(ctx)
			if err != nil {
				refused++
				if first == nil {
					first = err
				}
				continue
			}
			offsets[cf.Offset] = true
		}
		if refused > 0 {
			t.Fatalf("%s: %d of %d publishes of %d bytes refused; the first: %v", tc.queue, refused, tc.n, tc.size, first)
		}
		if len(offsets) != tc.n {
			t.Fatalf("%s: %d confirms at %d distinct offsets", tc.queue, tc.n, len(offsets))
		}
		if got, _ := queueHolds(t, p.Admin, tc.queue); got != int64(tc.n) {
			t.Fatalf("%s holds %d messages after %d confirmed publishes", tc.queue, got, tc.n)
		}
	}
}

// startSolo runs fibrild on a fresh data directory, its admin API on.
func startSolo(t *testing.T) *daemonProcess {
	t.Helper()
	return startDaemon(t, buildDaemon(t), "--storage.data_dir", t.TempDir(), "--server.listen", "127.0.0.1:0",
		"--admin.listen", "127.0.0.1:0", "--storage.min_free", "0")
}

// dialClient connects a client to p, closed when the test ends.
func dialClient(t *testing.T, ctx context.Context, p *daemonProcess) *client.Client {
	t.Helper()
	c, err := client.Dial(ctx, p.addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// queueHolds is GET /api/queues/{queue}'s unsettled messages and the
// bytes they count against the queue's limits.
func queueHolds(t *testing.T, admin, queue string) (messages, bytes int64) {
	t.Helper()
	var q struct {
		Messages int64 `json:"messages"`
		Bytes    int64 `json:"bytes"`
	}
	getJSON(t, admin+"/api/queues/"+queue, &q)
	return q.Messages, q.Bytes
}

// A queue's limits hold exactly under concurrent pipelined publishers on
// several connections, in both modes: with reject, exactly the limit's
// worth is confirmed and the rest refused as queue full; with drop-oldest
// every publish is confirmed and the queue ends within its limit.
func TestLimitsHoldUnderConcurrentPublishers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs fibrild")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := startSolo(t)
	const publishers, each, body = 4, 500, 1000
	clients := make([]*client.Client, publishers)
	for i := range clients {
		clients[i] = dialClient(t, ctx, p)
	}
	// burst has every client publish each messages at once and counts
	// the confirms and the queue-full refusals.
	burst := func(queue string) (confirmed, full int) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				futures := make([]*client.Future, each)
				for i := range futures {
					futures[i] = c.PublishAsyncContext(ctx, queue, client.Message{Body: bytes.Repeat([]byte{'l'}, body)})
				}
				for _, f := range futures {
					_, err := f.Wait(ctx)
					mu.Lock()
					switch {
					case err == nil:
						confirmed++
					case errors.Is(err, client.ErrQueueFull):
						full++
					default:
						t.Errorf("%s: publish failed: %v", queue, err)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return confirmed, full
	}
	for _, mode := range []string{"buffered", "durable"} {
		q := func(name string) client.QueueConfig {
			if mode == "durable" {
				return client.Queue(name).Durable()
			}
			return client.Queue(name).Buffered()
		}
		const maxMessages = 5
		name := "limit-count-" + mode
		if _, err := clients[0].DeclareQueue(ctx, q(name).MaxMessages(maxMessages)); err != nil {
			t.Fatal(err)
		}
		confirmed, full := burst(name)
		held, _ := queueHolds(t, p.Admin, name)
		if confirmed != maxMessages || full != publishers*each-maxMessages || held != maxMessages {
			t.Fatalf("%s (max %d messages, reject): %d confirmed, %d refused as full, %d held", name, maxMessages, confirmed, full, held)
		}

		const maxBytes = 20 * body
		name = "limit-bytes-" + mode
		if _, err := clients[0].DeclareQueue(ctx, q(name).MaxBytes(maxBytes)); err != nil {
			t.Fatal(err)
		}
		confirmed, full = burst(name)
		held, heldBytes := queueHolds(t, p.Admin, name)
		if confirmed == 0 || confirmed+full != publishers*each || int64(confirmed) != held || heldBytes > maxBytes {
			t.Fatalf("%s (max %d bytes, reject): %d confirmed, %d refused as full, %d held in %d bytes", name, maxBytes, confirmed, full, held, heldBytes)
		}

		name = "limit-drop-" + mode
		if _, err := clients[0].DeclareQueue(ctx, q(name).MaxMessages(maxMessages).DropOldest()); err != nil {
			t.Fatal(err)
		}
		confirmed, full = burst(name)
		held, _ = queueHolds(t, p.Admin, name)
		if confirmed != publishers*each || full != 0 || held != maxMessages {
			t.Fatalf("%s (max %d messages, drop oldest): %d confirmed, %d refused as full, %d held", name, maxMessages, confirmed, full, held)
		}
	}
}
