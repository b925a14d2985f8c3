package bridge

import (
	"context"
	"fmt"
	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/internal/brokertest"
	"log/slog"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fibril-edge/fibril/appliance/client"
)

// testTimeout bounds every wait; generous for -race on a loaded machine.
const testTimeout = 45 * time.Second

func quiet() *slog.Logger { return brokertest.Quiet() }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// startNATS runs an embedded NATS server with JetStream (file storage in a
// temp dir) on a random loopback port.
func startNATS(t *testing.T) *natsserver.Server {
	t.Helper()
	return startNATSAt(t, -1, t.TempDir())
}

// startNATSAt runs an embedded NATS server on port (-1: random) with its
// JetStream store in dir; starting it again on the same port and dir is a
// restart of the same server.
func startNATSAt(t *testing.T, port int, dir string) *natsserver.Server {
	t.Helper()
	return startNATSWith(t, &natsserver.Options{Port: port, StoreDir: dir})
}

// startNATSWith runs an embedded NATS server with opts, on loopback with
// JetStream and without logs or signal handlers.
func startNATSWith(t *testing.T, opts *natsserver.Options) *natsserver.Server {
	t.Helper()
	opts.Host, opts.JetStream, opts.NoLog, opts.NoSigs = "127.0.0.1", true, true, true
	ns, err := natsserver.NewServer(opts)
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return ns
}

// connectNATS is a plain NATS client for the test's own publishing.
func connectNATS(t *testing.T, ns *natsserver.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// startBroker runs a real Fibril broker behind a server on loopback and
// returns its address.
func startBroker(t *testing.T) string {
	t.Helper()
	_, addr := brokertest.Start(t)
	return addr
}

// fibril is a test client of the broker.
func fibril(t *testing.T, addr string) *client.Client {
	t.Helper()
	c, err := client.Dial(testCtx(t), addr, client.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func declare(t *testing.T, c *client.Client, q client.QueueConfig) {
	t.Helper()
	if _, err := c.DeclareQueue(testCtx(t), q); err != nil {
		t.Fatalf("declare %s: %v", q.Name(), err)
	}
}

// running is a Bridge running in the background.
type running struct {
	*Bridge
	cancel func() // cancels Run without waiting for it
	stop   func() // cancels Run and waits for it; fails the test on an error
}

// runBridge starts a bridge and waits until it is ready.
func runBridge(t *testing.T, opts Options) *running {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	if opts.RetryBackoff == 0 {
		opts.RetryBackoff = 5 * time.Millisecond
		opts.MaxRetryBackoff = 50 * time.Millisecond
	}
	b, err := New(opts)
	if err != nil {
		t.Fatalf("new bridge: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("bridge run: %v", err)
				}
			case <-time.After(testTimeout):
				t.Errorf("bridge did not stop")
			}
		})
	}
	t.Cleanup(stop)
	select {
	case <-b.Ready():
	case err := <-done:
		t.Fatalf("bridge ended before ready: %v", err)
	case <-time.After(testTimeout):
		t.Fatal("bridge not ready")
	}
	return &running{Bridge: b, cancel: cancel, stop: stop}
}

// waitFor waits until cond holds, for at most testTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	await.Within(t, testTimeout, what, cond)
}

// drain consumes queue until a sentinel published after everything else
// arrives (queues in these tests have one partition, so order holds) and
// returns the deliveries before it.
func drain(t *testing.T, c *client.Client, queue string) []*client.Delivery {
	t.Helper()
	ctx := testCtx(t)
	const sentinel = "--sentinel--"
	if _, err := c.Publish(ctx, queue, client.Message{ID: fmt.Sprintf("%s%d", sentinel, time.Now().UnixNano()), Body: []byte(sentinel)}); err != nil {
		t.Fatalf("publish sentinel: %v", err)
	}
	cons, err := c.Consume(ctx, queue, 500)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var got []*client.Delivery
	for {
		select {
		case d, ok := <-cons.Messages():
			if !ok {
				t.Fatalf("consumer ended: %v", cons.Err())
			}
			_ = d.Ack()
			if string(d.Body) == sentinel {
				return got
			}
			got = append(got, d)
		case <-ctx.Done():
			t.Fatalf("drain %s: %d so far: %v", queue, len(got), ctx.Err())
		}
	}
}
