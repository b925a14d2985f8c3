package client

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"
)

// testTimeout bounds every wait in these tests; generous, so that a slow
// machine under -race does not fail them.
const testTimeout = 10 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// dial connects to the fake and closes the client at the end of the test,
// then checks that nothing the client started is still running.
func dial(t *testing.T, s *fakeServer, opts Options) *Client {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	if opts.InitialBackoff == 0 {
		opts.InitialBackoff = 10 * time.Millisecond
	}
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = 100 * time.Millisecond
	}
	c, err := Dial(testCtx(t), s.addr(), opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() {
		c.Close()
		checkNoGoroutines(t)
	})
	return c
}

// checkNoGoroutines fails if a goroutine of the client is still alive.
// Close waits for all of them, but a goroutine that has signalled its end
// may not have returned yet, so a leftover gets a short grace (this is the
// one place a test looks again instead of waiting for an event: the
// runtime offers none for a goroutine's exit).
func checkNoGoroutines(t *testing.T) {
	t.Helper()
	var left string
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if left = clientGoroutine(); left == "" {
			return
		}
	}
	t.Errorf("goroutine left running after Close:\n%s", left)
}

func clientGoroutine() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, fn := range []string{"client.(*conn).", "client.(*Consumer).", "client.(*Client).supervise", "client.newConsumer"} {
			if strings.Contains(g, fn) {
				return g
			}
		}
	}
	return ""
}

// waitDone waits for ch to close.
func waitDone(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(testTimeout):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func declare(t *testing.T, c *Client, q QueueConfig) DeclareResult {
	t.Helper()
	r, err := c.DeclareQueue(testCtx(t), q)
	if err != nil {
		t.Fatalf("declare %s: %v", q, err)
	}
	return r
}

// receive takes the next delivery from a channel consumer.
func receive(t *testing.T, cons *Consumer) *Delivery {
	t.Helper()
	select {
	case d, ok := <-cons.Messages():
		if !ok {
			t.Fatalf("consumer ended: %v", cons.Err())
		}
		return d
	case <-time.After(testTimeout):
		t.Fatal("timed out waiting for a delivery")
	}
	return nil
}
