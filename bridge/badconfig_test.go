package bridge

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fibril-edge/fibril/appliance/client"
)

// Issue test 5: bad configuration gets a clear error at start or a visible
// retrying state, never a crash.
func TestBadConfiguration(t *testing.T) {
	t.Run("invalid options", func(t *testing.T) {
		_, err := New(Options{URLs: []string{"nats://127.0.0.1:1"}, FibrilAddr: "x:1",
			Ingest: []Ingest{{Subject: "a.>.b", Queue: "q"}}})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "'>' must be the last token") {
			t.Fatalf("New: %v", err)
		}
	})
	t.Run("two ingests on one durable consumer", func(t *testing.T) {
		// One JetStream consumer's filter is whichever ingest set it last:
		// the two would route each other's messages and leave some unpulled.
		_, err := New(Options{URLs: []string{"nats://127.0.0.1:1"}, FibrilAddr: "x:1", Ingest: []Ingest{
			{Mode: JetStream, Stream: "EV", Subject: "ev.a", Queue: "qa"},
			{Mode: JetStream, Stream: "EV", Subject: "ev.b", Queue: "qb"},
		}})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "share durable") {
			t.Fatalf("New: %v", err)
		}
		if _, err := New(Options{URLs: []string{"nats://127.0.0.1:1"}, FibrilAddr: "x:1", Ingest: []Ingest{
			{Mode: JetStream, Stream: "EV", Subject: "ev.a", Queue: "qa", Durable: "a"},
			{Mode: JetStream, Stream: "EV", Subject: "ev.b", Queue: "qb", Durable: "b"},
		}}); err != nil {
			t.Fatalf("New with a durable each: %v", err)
		}
	})
	t.Run("unreachable NATS", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := "nats://" + ln.Addr().String()
		ln.Close()
		addr := startBroker(t)
		br := runBridge(t, Options{URLs: []string{dead}, FibrilAddr: addr,
			ReconnectWait: 10 * time.Millisecond, MaxReconnectWait: 50 * time.Millisecond,
			Ingest: []Ingest{{Subject: "a.*", Queue: "q-{1}"}}})
		if s := br.Stats(); s.State != StateReconnecting || s.LastError == "" {
			t.Fatalf("stats: %+v", s)
		}
		br.stop()
	})
	t.Run("unknown stream", func(t *testing.T) {
		ns := startNATS(t)
		addr := startBroker(t)
		b, err := New(Options{URLs: []string{ns.ClientURL()}, FibrilAddr: addr, Logger: quiet(),
			RetryBackoff: 5 * time.Millisecond, MaxRetryBackoff: 20 * time.Millisecond,
			Ingest: []Ingest{{Mode: JetStream, Stream: "NOPE", Queue: "q"}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.Run(ctx) }()
		waitFor(t, "a visible error", func() bool { return strings.Contains(b.Stats().LastError, "NOPE") })
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
	})
	t.Run("unknown queue", func(t *testing.T) {
		ns := startNATS(t)
		nc, js := connectNATS(t, ns)
		addr := startBroker(t)
		fc := fibril(t, addr)
		fillStream(t, js, "ALERTS", "alerts.x", 1)
		b, err := New(Options{URLs: []string{ns.ClientURL()}, FibrilAddr: addr, Logger: quiet(),
			RetryBackoff: 5 * time.Millisecond, MaxRetryBackoff: 20 * time.Millisecond,
			Ingest: []Ingest{
				{Mode: JetStream, Stream: "ALERTS", Queue: "alerts"},
				{Subject: "temp", Queue: "temps"},
			},
			Egress: []Egress{{Queue: "commands", Subject: "cmd.out"}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.Run(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
		// The core subscription is up once a message is counted; publish
		// until one is dropped for the missing queue.
		waitFor(t, "a core message dropped for its missing queue", func() bool {
			if err := nc.Publish("temp", []byte("21.5")); err != nil {
				t.Fatal(err)
			}
			return b.Stats().Dropped["not_found"] > 0
		})
		want := []string{"alerts", "commands", "temps"}
		waitFor(t, "every missing queue reported", func() bool { return slices.Equal(b.Stats().MissingQueues, want) })
		if s := b.Stats(); !s.Blocked || s.JetStreamAcked != 0 || !strings.Contains(s.LastError, "not_found") && !strings.Contains(s.LastError, "not found") {
			t.Fatalf("stats with missing queues: %+v", s)
		}
		select {
		case <-b.Ready():
			t.Fatal("ready while the egress queue is missing")
		default:
		}

		// Declared, the queues are used: the held JetStream message is
		// stored and acked, the egress subscribes, core publishes land.
		for _, q := range want {
			declare(t, fc, client.Queue(q).Buffered())
		}
		waitFor(t, "the jetstream message acked", func() bool { return b.Stats().JetStreamAcked == 1 })
		<-b.Ready()
		waitFor(t, "a core message stored", func() bool {
			if err := nc.Publish("temp", []byte("21.5")); err != nil {
				t.Fatal(err)
			}
			return b.Stats().Published > 1
		})
		if s := b.Stats(); len(s.MissingQueues) != 0 || s.Blocked {
			t.Fatalf("stats after declaring: %+v", s)
		}
		if got := drain(t, fc, "alerts"); len(got) != 1 || string(got[0].Body) != "0" {
			t.Fatalf("alerts: %d messages", len(got))
		}
	})
	t.Run("unknown queue at start", func(t *testing.T) {
		ns := startNATS(t)
		_, js := connectNATS(t, ns)
		if _, err := js.CreateStream(testCtx(t), jetstream.StreamConfig{Name: "ALERTS", Subjects: []string{"alerts.>"}}); err != nil {
			t.Fatal(err)
		}
		var declared atomic.Bool
		br := runBridge(t, Options{URLs: []string{ns.ClientURL()}, FibrilAddr: startBroker(t),
			QueueExists: func(q string) bool { return q == "alerts" && declared.Load() },
			Ingest:      []Ingest{{Mode: JetStream, Stream: "ALERTS", Queue: "alerts"}}})
		// Reported at start, with no message in the stream.
		if s := br.Stats(); !slices.Equal(s.MissingQueues, []string{"alerts"}) || s.Received != 0 {
			t.Fatalf("stats at start: %+v", s)
		}
		declared.Store(true)
		if s := br.Stats(); len(s.MissingQueues) != 0 {
			t.Fatalf("stats once declared: %+v", s)
		}
	})
}
