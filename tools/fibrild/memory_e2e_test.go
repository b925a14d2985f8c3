package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/appliance/wire"
	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/internal/wiretest"
)

// memoryBound is what each attack below may add to the daemon's resident
// memory (measured here: 6, 36 and 13 MiB): what the review measured was 321 MB (headers), 530 MB (ids) and
// one consumer window per connection (deliveries). The bound leaves room
// for the garbage the refused frames leave behind before a collection.
const memoryBound = 64 << 20

// queueView is the part of GET /api/queues/NAME these tests read.
type queueView struct {
	Bytes    int64 `json:"bytes"`
	Messages int64 `json:"messages"`
	Dedupe   struct {
		Entries int64 `json:"entries"`
		Bytes   int64 `json:"bytes"`
	} `json:"dedupe"`
}

func getQueue(t *testing.T, admin, token, name string) queueView {
	t.Helper()
	req, err := http.NewRequest("GET", admin+"/api/queues/"+name, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v queueView
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/queues/%s: %s", name, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// rss is the daemon's resident memory now.
func rss(t *testing.T, p *daemonProcess) int64 {
	t.Helper()
	u, err := p.Usage()
	if err != nil {
		t.Fatal(err)
	}
	return u.RSS
}

// rssGrowth reports how much the daemon's resident memory grew since
// before, failing the test past memoryBound.
func rssGrowth(t *testing.T, p *daemonProcess, before int64, what string) {
	t.Helper()
	u, err := p.Usage()
	if err != nil {
		t.Fatal(err)
	}
	grew := u.RSS - before
	t.Logf("%s: RSS %d KiB (+%d KiB)", what, u.RSS>>10, grew>>10)
	if grew > memoryBound {
		t.Fatalf("%s grew the daemon's RSS by %d MiB (from %d MiB), bound %d MiB", what, grew>>20, before>>20, memoryBound>>20)
	}
}

// TestMemoryBoundsProcess repeats the review's memory attacks on the
// client port against a real fibrild and reads its RSS: messages with
// large headers into a queue with max_bytes (the review's 1 MiB queue
// held 321 MB of headers), publishes with large ids into a queue with a
// dedupe window (2,372 ids took 530 MB), and consumers that never read
// their sockets (queued deliveries were bounded per connection only).
// Each now stays within its bound, and the legitimate path next to it
// works: a small message still fits the queue, a repeated recent id is
// still a duplicate, and a consumer that reads gets every message.
func TestMemoryBoundsProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the fibrild binary")
	}
	const token = "memory-test-token"
	p := startDaemon(t, buildDaemon(t), "--server.tokens", token, "--storage.min_free", "0",
		"--server.delivery_budget", "8MiB", "--server.slow_consumer_grace", "1s")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl := dialE2E(t, ctx, p.addr, client.Options{Token: token})

	t.Run("headers count toward max_bytes", func(t *testing.T) {
		before := rss(t, p)
		if _, err := cl.DeclareQueue(ctx, client.Queue("capped").Buffered().MaxBytes(1<<20).RejectWhenFull()); err != nil {
			t.Fatal(err)
		}
		big := client.Message{Body: []byte("x")}
		for i := range 4 {
			big.Headers = append(big.Headers, client.Header{Key: fmt.Sprint("h", i), Value: strings.Repeat("v", 60<<10)})
		}
		var accepted, refused int
		for range 800 { // 190 MB of headers offered
			_, err := cl.Publish(ctx, "capped", big)
			switch {
			case err == nil:
				accepted++
			case errors.Is(err, client.ErrQueueFull):
				refused++
			default:
				t.Fatalf("publish: %v", err)
			}
		}
		v := getQueue(t, p.Admin, token, "capped")
		t.Logf("%d accepted, %d refused; the queue stores %d bytes in %d messages", accepted, refused, v.Bytes, v.Messages)
		if v.Bytes > 1<<20 || accepted > 5 {
			t.Fatalf("a 1 MiB queue took %d messages of 240 KiB headers (%d bytes)", accepted, v.Bytes)
		}
		rssGrowth(t, p, before, "800 publishes of 240 KiB headers")
		if _, err := cl.Publish(ctx, "capped", client.Message{Body: []byte("small")}); err != nil {
			t.Fatalf("a small message that fits the room left: %v", err)
		}
	})

	t.Run("the dedupe table is bounded", func(t *testing.T) {
		before := rss(t, p)
		if _, err := cl.DeclareQueue(ctx, client.Queue("ids").Buffered().DedupeWindow(time.Hour)); err != nil {
			t.Fatal(err)
		}
		const n = 2400 // 157 MB of ids
		id := func(i int) string { return fmt.Sprintf("%08d", i) + strings.Repeat("i", wire.MaxStringLen-8) }
		for i := range n {
			if _, err := cl.Publish(ctx, "ids", client.Message{ID: id(i), Body: []byte("x")}); err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
		v := getQueue(t, p.Admin, token, "ids")
		t.Logf("dedupe table: %d ids, %d bytes", v.Dedupe.Entries, v.Dedupe.Bytes)
		if v.Dedupe.Bytes > 16<<20 || v.Dedupe.Entries >= n {
			t.Fatalf("the dedupe table holds %d ids in %d bytes: past its default bound of 16 MiB", v.Dedupe.Entries, v.Dedupe.Bytes)
		}
		rssGrowth(t, p, before, fmt.Sprintf("%d ids of 64 KiB", n))
		// The newest ids are still remembered.
		cf, err := cl.Publish(ctx, "ids", client.Message{ID: id(n - 1), Body: []byte("x")})
		if err != nil || !cf.Duplicate {
			t.Fatalf("the newest id published again: duplicate %v, %v", cf.Duplicate, err)
		}
	})

	t.Run("queued deliveries share one budget", func(t *testing.T) {
		before := rss(t, p)
		if _, err := cl.DeclareQueue(ctx, client.Queue("fanout").Buffered()); err != nil {
			t.Fatal(err)
		}
		// Twenty consumers with a window of 1,000 that never read: 64
		// MiB each if their windows filled.
		var slow []net.Conn
		for i := range 20 {
			c := wiretest.Dial(t, p.addr, token)
			c.Request(t, &wire.Subscribe{Corr: 1, SubID: uint32(i + 1), Queue: "fanout", Prefetch: 1000})
			slow = append(slow, c.NC)
		}
		body := bytes.Repeat([]byte("d"), 64<<10)
		const n = 2000 // 128 MB
		for i := range n {
			if _, err := cl.Publish(ctx, "fanout", client.Message{Body: body}); err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
		// Each is paused, then closed (the reason logged, and sent in a
		// Goodbye it will not read); what was queued to them is dropped.
		var m map[string]float64
		await.Until(t, ctx, "every slow consumer to be closed", func() bool {
			m = scrape(t, p.Admin, token)
			return m["fibril_slow_consumers_closed_total"] == 20 && m["fibril_delivery_queued_bytes"] == 0
		})
		rssGrowth(t, p, before, "20 consumers that never read, 128 MB published")
		if n := strings.Count(p.Log(), "closing a slow consumer"); n != 20 {
			t.Fatalf("the daemon logged %d slow consumers closed, want 20", n)
		}
		for _, nc := range slow {
			nc.Close()
		}
		// A consumer that reads gets every message.
		cons, err := cl.Consume(ctx, "fanout", 50)
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		for got := 0; got < n; got++ {
			select {
			case d := <-cons.Messages():
				if err := d.Ack(); err != nil {
					t.Fatal(err)
				}
			case <-ctx.Done():
				t.Fatalf("a reading consumer got %d of %d messages", got, n)
			}
		}
	})
	p.stop(t)
}
