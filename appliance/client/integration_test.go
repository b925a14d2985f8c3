package client_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/internal/brokertest"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/client"
)

func quiet() *slog.Logger { return brokertest.Quiet() }

// openBroker opens a real broker on a temporary directory.
func openBroker(t *testing.T) *appliance.Broker { return brokertest.Open(t) }

// serve runs a server for b on ln; shutdown (also run at the end of the
// test) stops it gracefully.
func serve(t *testing.T, b *appliance.Broker, ln net.Listener) (shutdown func()) {
	return brokertest.Serve(t, b, ln)
}

// startRestartable runs a real broker behind a server on loopback and
// returns the broker, the address and the server's shutdown, so that a
// test can start a server on the same address again.
func startRestartable(t *testing.T) (*appliance.Broker, string, func()) {
	t.Helper()
	b := openBroker(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return b, ln.Addr().String(), serve(t, b, ln)
}

// startBroker runs a real broker behind a server on loopback.
func startBroker(t *testing.T) (*appliance.Broker, string) {
	t.Helper()
	b, addr, _ := startRestartable(t)
	return b, addr
}

// Against the real broker, in both modes: publish 10,000 messages with
// PublishAsync over 4 partitions, consume and ack them all. Nothing is
// lost or delivered twice, and each partition's order is kept, both in the
// confirms and in the deliveries.
func TestAgainstBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("publishes 20,000 messages")
	}
	b, addr := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.Options{ClientName: "integration", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	for _, mode := range []client.Durability{client.Durable, client.Buffered} {
		t.Run(mode.String(), func(t *testing.T) {
			name := "orders-" + mode.String()
			q := client.Queue(name).Partitions(4).DedupeWindow(time.Minute)
			if mode == client.Buffered {
				q = q.Buffered()
			} else {
				q = q.Durable()
			}
			res, err := c.DeclareQueue(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Created || res.Durability != mode || res.Partitions != 4 || (res.Warning != "") != (mode == client.Buffered) {
				t.Errorf("declare = %+v", res)
			}
			other := client.Queue(name).Durable()
			if mode == client.Durable {
				other = client.Queue(name).Buffered()
			}
			if _, err := c.DeclareQueue(ctx, other); !errors.Is(err, client.ErrConflict) {
				t.Errorf("declare with the other mode: %v, want ErrConflict", err)
			}
			if res, err := c.DeclareQueue(ctx, client.Queue(name)); err != nil || res.Created || res.Durability != mode {
				t.Errorf("declare without a mode = %+v, %v; want the mode kept", res, err)
			}
			roundTrip(t, ctx, b, c, name)
		})
	}
}

func roundTrip(t *testing.T, ctx context.Context, b *appliance.Broker, c *client.Client, queue string) {
	const n, keys = 10000, 16
	futures := make([]*client.Future, n)
	for i := range n {
		futures[i] = c.PublishAsync(queue, client.Message{
			ID:      strconv.Itoa(i),
			Key:     fmt.Sprint("key-", i%keys),
			Headers: []client.Header{{Key: "i", Value: strconv.Itoa(i)}},
			Body:    []byte(strconv.Itoa(i)),
		})
	}
	// Confirms: one partition per key, offsets rising in publish order.
	partitionOf := make(map[int]int) // key → partition
	lastOffset := make(map[int]uint64)
	for i, f := range futures {
		cf, err := f.Wait(ctx)
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if cf.Duplicate {
			t.Fatalf("publish %d confirmed as a duplicate", i)
		}
		k := i % keys
		if p, ok := partitionOf[k]; ok {
			if p != cf.Partition {
				t.Fatalf("key %d went to partitions %d and %d", k, p, cf.Partition)
			}
			if cf.Offset <= lastOffset[k] {
				t.Fatalf("publish %d at offset %d, not after %d of the same key", i, cf.Offset, lastOffset[k])
			}
		}
		partitionOf[k], lastOffset[k] = cf.Partition, cf.Offset
	}

	cons, err := c.Consume(ctx, queue, 500)
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]bool, n)
	lastDelivered := make(map[int]uint64) // partition → offset
	for got := 0; got < n; got++ {
		var d *client.Delivery
		select {
		case d = <-cons.Messages():
		case <-ctx.Done():
			t.Fatalf("after %d deliveries: %v", got, ctx.Err())
		}
		i, err := strconv.Atoi(string(d.Body))
		if err != nil || d.ID != string(d.Body) {
			t.Fatalf("delivery %+v", d)
		}
		if h, _ := d.Header("i"); h != d.ID {
			t.Fatalf("delivery %d has header i=%q", i, h)
		}
		if want := fmt.Sprint("key-", i%keys); d.Key != want {
			t.Fatalf("delivery %d has key %q, want %q", i, d.Key, want)
		}
		if seen[i] || d.Deliveries != 1 {
			t.Fatalf("message %d delivered again (delivery %d)", i, d.Deliveries)
		}
		seen[i] = true
		if last, ok := lastDelivered[d.Partition]; ok && d.Offset <= last {
			t.Fatalf("partition %d delivered offset %d after %d", d.Partition, d.Offset, last)
		}
		lastDelivered[d.Partition] = d.Offset
		if err := d.Ack(); err != nil {
			t.Fatalf("ack %d: %v", i, err)
		}
	}
	// The broker applies every settle read before the Unsubscribe; a
	// durable queue's acks count as in flight until their records are
	// synced. The broker offers no event for that, so look until they are
	// (as the engine's own tests do).
	if err := cons.Close(); err != nil {
		t.Fatal(err)
	}
	info := settled(t, ctx, b, queue)
	if info.Messages != 0 || info.Ready != 0 || info.Counters.Published != n {
		t.Errorf("after acking everything: %d messages, %d ready, %d in flight, %d published",
			info.Messages, info.Ready, info.InFlight, info.Counters.Published)
	}
}

// settled waits until queue has nothing in flight. A durable queue's acks
// count as in flight until their records are synced, and the broker offers
// no event for that, so this looks until they are (as the engine's own
// tests do), within ctx.
func settled(t *testing.T, ctx context.Context, b *appliance.Broker, queue string) appliance.QueueInfo {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		info, err := b.QueueInfo(queue)
		if err != nil {
			t.Fatal(err)
		}
		if info.InFlight == 0 {
			return info
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("%s: %d still in flight", queue, info.InFlight)
		}
	}
}

// The server shuts down (Goodbye) and a new one starts on the same
// address: the client answers the Goodbye, reconnects, subscribes again,
// and every message is consumed; deliveries from the first connection are
// stale.
func TestReconnectToRestartedServer(t *testing.T) {
	b, addr, shutdown := startRestartable(t)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.Options{Logger: quiet(), InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.DeclareQueue(ctx, client.Queue("jobs").Buffered().DedupeWindow(time.Minute)); err != nil {
		t.Fatal(err)
	}
	const n = 100
	for i := range n {
		if _, err := c.Publish(ctx, "jobs", client.Message{ID: strconv.Itoa(i), Body: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := c.Consume(ctx, "jobs", 10)
	if err != nil {
		t.Fatal(err)
	}
	next := func() *client.Delivery {
		select {
		case d := <-cons.Messages():
			return d
		case <-ctx.Done():
			t.Fatal("no delivery")
		}
		return nil
	}
	acked := make(map[uint64]bool)
	for range n / 2 {
		d := next()
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
		acked[d.Offset] = true
	}
	held := next() // not acked when the server goes away

	shutdown()
	ln2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	serve(t, b, ln2)

	if err := held.Ack(); !errors.Is(err, client.ErrStaleDelivery) {
		t.Errorf("ack of a delivery from the old connection: %v, want ErrStaleDelivery", err)
	}
	for len(acked) < n {
		d := next()
		err := d.Ack()
		if errors.Is(err, client.ErrStaleDelivery) {
			continue // handed out just before the loss; it comes again
		}
		if err != nil {
			t.Fatal(err)
		}
		if acked[d.Offset] {
			t.Fatalf("offset %d delivered again after its ack", d.Offset)
		}
		acked[d.Offset] = true
	}
	if _, err := c.Publish(ctx, "jobs", client.Message{ID: "0"}); err != nil {
		t.Errorf("publish after the reconnect: %v", err)
	}
	if err := cons.Close(); err != nil {
		t.Fatal(err)
	}
	if info := settled(t, ctx, b, "jobs"); info.Messages != 0 || info.Counters.Duplicates != 1 {
		t.Errorf("after the restart: %d messages, %d duplicates; want 0 and 1", info.Messages, info.Counters.Duplicates)
	}
}

// recordLog passes on every record the client logs.
type recordLog struct{ records chan slog.Record }

func newRecordLog() recordLog { return recordLog{records: make(chan slog.Record, 4096)} }

func (h recordLog) Enabled(context.Context, slog.Level) bool      { return true }
func (h recordLog) WithAttrs([]slog.Attr) slog.Handler            { return h }
func (h recordLog) WithGroup(string) slog.Handler                 { return h }
func (h recordLog) Handle(_ context.Context, r slog.Record) error { h.records <- r.Clone(); return nil }

// A server back after a short restart is reached again from the initial
// backoff: the waits a restart ran up start over once a session is
// established, however short the session that then ends.
func TestBackoffStartsOverAfterAReconnect(t *testing.T) {
	b, addr, shutdown := startRestartable(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logs := newRecordLog()
	c, err := client.Dial(ctx, addr, client.Options{Logger: slog.New(logs),
		InitialBackoff: 5 * time.Millisecond, MaxBackoff: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// next is the attempt number of the next failed reconnect logged, or
	// 0 for a reconnect.
	next := func() int64 {
		for {
			select {
			case r := <-logs.records:
				switch r.Message {
				case "fibril: reconnected":
					return 0
				case "fibril: reconnect failed":
					var attempt int64
					r.Attrs(func(a slog.Attr) bool {
						if a.Key == "attempt" {
							attempt = a.Value.Int64()
						}
						return true
					})
					return attempt
				}
			case <-ctx.Done():
				t.Fatal("the client logged no reconnect attempt")
			}
		}
	}
	down := func() {
		shutdown()
		for next() < 3 { // three failed attempts: the backoff has grown
		}
	}
	up := func() {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("cannot listen on %s again: %v", addr, err)
		}
		shutdown = serve(t, b, l)
		for next() != 0 { // reconnected
		}
	}
	down()
	up()
	shutdown() // a session of moments
	if a := next(); a != 1 {
		t.Fatalf("after a reconnect, the next loss's first failed attempt is number %d, want 1", a)
	}
}

// A clean Close is not a lost connection: the client neither says it is
// reconnecting nor tries to.
func TestCloseIsNotALostConnection(t *testing.T) {
	_, addr := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logs := newRecordLog()
	for range 20 {
		c, err := client.Dial(ctx, addr, client.Options{Logger: slog.New(logs)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.DeclareQueue(ctx, client.Queue("q")); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	seen := map[string]int{}
	for len(logs.records) > 0 { // Close waited for every goroutine: all is logged
		seen[(<-logs.records).Message]++
	}
	for _, msg := range []string{"fibril: connection lost; reconnecting", "fibril: reconnect failed", "fibril: reconnected"} {
		if n := seen[msg]; n != 0 {
			t.Errorf("20 clean closes logged %q %d times", msg, n)
		}
	}
}

// SetMode against a real broker and server: each confirm names the mode
// it was given under, before and after the change; a second change to the
// same mode changes nothing; an unknown queue is ErrNotFound.
func TestSetModeAgainstBroker(t *testing.T) {
	_, addr := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.DeclareQueue(ctx, client.Queue("m").Buffered()); err != nil {
		t.Fatal(err)
	}
	cf, err := c.Publish(ctx, "m", client.Message{Body: []byte("before")})
	if err != nil || cf.Durability != client.Buffered {
		t.Fatalf("publish before the change: %+v, %v", cf, err)
	}
	for range 2 {
		res, err := c.SetMode(ctx, "m", client.Durable)
		if err != nil || res.Durability != client.Durable || res.Warning != "" {
			t.Fatalf("SetMode durable: %+v, %v", res, err)
		}
	}
	cf, err = c.Publish(ctx, "m", client.Message{Body: []byte("after")})
	if err != nil || cf.Durability != client.Durable {
		t.Fatalf("publish after the change: %+v, %v", cf, err)
	}
	if _, err := c.DeclareQueue(ctx, client.Queue("m").Buffered()); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("a declare naming the old mode: %v", err)
	}
	if _, err := c.SetMode(ctx, "nope", client.Buffered); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("SetMode of an unknown queue: %v", err)
	}
	if _, err := c.SetMode(ctx, "m", 0); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("SetMode to no mode: %v", err)
	}
}
