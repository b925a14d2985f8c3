package bridge

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
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
}
