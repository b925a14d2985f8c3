package client

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// gate is a Dialer that refuses to connect while down, and reports every
// attempt it refuses.
type gate struct {
	down    atomic.Bool
	refused chan struct{}
}

func newGate() *gate { return &gate{refused: make(chan struct{}, 100)} }

func (g *gate) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if g.down.Load() {
		select {
		case g.refused <- struct{}{}:
		default:
		}
		return nil, errors.New("gate: down")
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// After a lost connection the client reconnects and subscribes again;
// deliveries from before the loss are stale, and their messages come again.
func TestReconnectResubscribes(t *testing.T) {
	s := newFake(t)
	c := dial(t, s, Options{})
	declare(t, c, Queue("q"))
	publishN(t, c, "q", 1)
	cons, err := c.Consume(testCtx(t), "q", 0)
	if err != nil {
		t.Fatal(err)
	}
	old := receive(t, cons)

	s.killConns()
	s.waitFor("a new connection with the subscription", func() bool {
		return s.hellos == 2 && s.countLocked(wire.TypeSubscribe) == 2 && len(s.conns) == 1
	})
	again := receive(t, cons)
	if again.Offset != old.Offset || again.Deliveries != 2 || !again.Redelivered() {
		t.Errorf("redelivery %+v of %+v", again, old)
	}
	if err := old.Ack(); !errors.Is(err, ErrStaleDelivery) {
		t.Errorf("ack of a delivery from the lost connection: %v, want ErrStaleDelivery", err)
	}
	if err := again.Ack(); err != nil {
		t.Fatal(err)
	}
	s.waitFor("the redelivery acked", func() bool { return s.settledLocked("q") })

	// The same SubID on the new connection, and new messages still flow
	// (Publish, not PublishAsync: the client may not have made the new
	// connection current yet).
	if _, err := c.Publish(testCtx(t), "q", Message{Body: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	if d := receive(t, cons); d.Offset != 1 {
		t.Errorf("after reconnect got offset %d, want 1", d.Offset)
	}
	s.mu.Lock()
	var ids []uint32
	for _, f := range s.received {
		if f, ok := f.(*wire.Subscribe); ok {
			ids = append(ids, f.SubID)
		}
	}
	s.mu.Unlock()
	if len(ids) != 2 || ids[0] != ids[1] {
		t.Errorf("SubIDs %v, want the same one twice", ids)
	}
}

// A publish in flight when the connection drops fails with a retryable
// ErrConnectionLost; retried with the same ID after the reconnect it is
// confirmed as a duplicate, because the broker had stored it.
func TestPublishRetryAfterLoss(t *testing.T) {
	var dropped atomic.Bool
	s := newFake(t, func(s *fakeServer) {
		s.onFrame = func(fc *fakeConn, f wire.Frame) bool {
			if p, ok := f.(*wire.Publish); ok && !dropped.Swap(true) {
				s.mu.Lock()
				s.publishLocked(p) // stored, but the confirm never leaves
				s.mu.Unlock()
				fc.nc.Close()
				return false
			}
			return true
		}
	})
	c := dial(t, s, Options{})
	declare(t, c, Queue("q").DedupeWindow(time.Hour))
	_, err := c.Publish(testCtx(t), "q", Message{ID: "m1", Body: []byte("x")})
	if !errors.Is(err, ErrConnectionLost) || !IsRetryable(err) {
		t.Fatalf("publish cut off: %v, want a retryable ErrConnectionLost", err)
	}
	cf, err := c.Publish(testCtx(t), "q", Message{ID: "m1", Body: []byte("x")})
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if !cf.Duplicate || cf.Offset != 0 {
		t.Errorf("retry confirmed %+v, want a duplicate of offset 0", cf)
	}
}

// While reconnecting, PublishAsync fails at once, and Publish and
// DeclareQueue wait for the connection within their ctx.
func TestCallsWhileReconnecting(t *testing.T) {
	s := newFake(t)
	g := newGate()
	c := dial(t, s, Options{Dialer: g.dial})
	declare(t, c, Queue("q"))

	g.down.Store(true)
	s.killConns()
	waitDone(t, g.refused, "a refused reconnect")

	_, err := c.PublishAsync("q", Message{}).Result()
	if !errors.Is(err, ErrNotConnected) || !IsRetryable(err) {
		t.Errorf("PublishAsync while reconnecting: %v, want ErrNotConnected", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.DeclareQueue(ctx, Queue("q")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("DeclareQueue while reconnecting: %v, want context.DeadlineExceeded", err)
	}

	done := make(chan error, 1)
	go func() {
		_, err := c.Publish(testCtx(t), "q", Message{Body: []byte("waited")})
		done <- err
	}()
	g.down.Store(false)
	if err := <-done; err != nil {
		t.Errorf("Publish across the reconnect: %v", err)
	}
}

// A consumer whose queue is gone when it re-subscribes ends with the
// broker's error.
func TestResubscribeNotFound(t *testing.T) {
	s := newFake(t)
	c := dial(t, s, Options{})
	declare(t, c, Queue("q"))
	errs := make(chan error, 4)
	cons, err := c.subscribe(testCtx(t), "q", SubscribeOptions{OnError: func(err error) { errs <- err }})
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	delete(s.queues, "q")
	s.mu.Unlock()
	s.killConns()
	waitDone(t, cons.Done(), "the consumer to end")
	if err := cons.Err(); !errors.Is(err, ErrNotFound) {
		t.Errorf("Err = %v, want ErrNotFound", err)
	}
	if err := <-errs; !errors.Is(err, ErrNotFound) {
		t.Errorf("reported %v, want ErrNotFound", err)
	}
	if _, ok := <-cons.Messages(); ok {
		t.Error("Messages open after the consumer ended")
	}
}

// The broker's Goodbye: the client answers once its requests are answered,
// then reconnects.
func TestBrokerGoodbye(t *testing.T) {
	s := newFake(t)
	c := dial(t, s, Options{})
	declare(t, c, Queue("q"))
	s.mu.Lock()
	for fc := range s.conns {
		fc.send(&wire.Goodbye{Reason: "shutting down"})
	}
	s.mu.Unlock()
	s.waitFor("the client's goodbye and a new connection", func() bool {
		return s.countLocked(wire.TypeGoodbye) == 1 && s.hellos == 2
	})
	if _, err := c.Publish(testCtx(t), "q", Message{}); err != nil {
		t.Errorf("publish after the broker's goodbye: %v", err)
	}
}

// The client sends Heartbeats when idle, and a broker that answers them
// keeps the connection.
func TestHeartbeatKeepsConnection(t *testing.T) {
	s := newFake(t, func(s *fakeServer) {
		s.heartbeat = 100
		s.onFrame = func(fc *fakeConn, f wire.Frame) bool {
			if f.Type() == wire.TypeHeartbeat {
				fc.send(&wire.Heartbeat{})
			}
			return true
		}
	})
	dial(t, s, Options{})
	s.waitFor("heartbeats", func() bool { return s.countLocked(wire.TypeHeartbeat) >= 4 })
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hellos != 1 {
		t.Errorf("%d connections, want 1", s.hellos)
	}
}

// A broker that sends nothing for three heartbeat intervals is given up
// on, and the client reconnects.
func TestSilentBrokerReconnect(t *testing.T) {
	s := newFake(t, func(s *fakeServer) { s.heartbeat = 30 })
	dial(t, s, Options{})
	s.waitFor("a reconnect", func() bool { return s.hellos >= 2 })
}

// Options.Heartbeat shorter than the broker's sends heartbeats more often.
func TestHeartbeatOption(t *testing.T) {
	s := newFake(t, func(s *fakeServer) { s.heartbeat = 60 * 1000 })
	c := dial(t, s, Options{Heartbeat: 20 * time.Millisecond})
	s.waitFor("heartbeats", func() bool { return s.countLocked(wire.TypeHeartbeat) >= 2 })
	c.mu.Lock()
	cn := c.cur
	c.mu.Unlock()
	if cn.sendIdle != 20*time.Millisecond || cn.silence != 3*time.Minute {
		t.Errorf("send every %v, silence %v", cn.sendIdle, cn.silence)
	}
}

func TestBackoff(t *testing.T) {
	for n, want := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		want *= time.Millisecond
		for range 20 {
			if d := backoff(n, 100*time.Millisecond, time.Second); d < want/2 || d > want {
				t.Fatalf("backoff(%d) = %v, want [%v, %v]", n, d, want/2, want)
			}
		}
	}
	if d := backoff(200, time.Second, time.Minute); d < 30*time.Second || d > time.Minute {
		t.Errorf("backoff(200) = %v: no cap", d)
	}
}

// A publish chained with PublishAsyncAfter goes out right behind the one
// it follows on the same connection; once that connection is lost it is
// never sent on the next one, so a later message cannot be stored ahead of
// an earlier one that its publisher will resend.
func TestPublishAsyncAfterKeepsTheConnection(t *testing.T) {
	var held func() ([]*wire.Publish, *fakeConn)
	s := newFake(t, func(s *fakeServer) { held = holdPublishes(s) })
	c := dial(t, s, Options{})
	declare(t, c, Queue("q"))
	ctx := testCtx(t)

	first := c.PublishAsyncContext(ctx, "q", Message{Body: []byte("a")})
	second := c.PublishAsyncAfter(ctx, first, "q", Message{Body: []byte("b")})
	s.waitFor("both publishes on one connection", func() bool { return s.countLocked(wire.TypePublish) == 2 })
	if ps, _ := held(); string(ps[0].Body) != "a" || string(ps[1].Body) != "b" {
		t.Fatalf("publishes arrived as %q, %q", ps[0].Body, ps[1].Body)
	}

	s.killConns()
	for _, f := range []*Future{first, second} {
		if _, err := f.Result(); !errors.Is(err, ErrConnectionLost) {
			t.Fatalf("a publish in flight on the lost connection: %v, want ErrConnectionLost", err)
		}
	}
	declare(t, c, Queue("q")) // waits for the new connection
	_, err := c.PublishAsyncAfter(ctx, second, "q", Message{Body: []byte("c")}).Wait(ctx)
	if !errors.Is(err, ErrConnectionLost) || !IsRetryable(err) {
		t.Fatalf("a publish following one from the lost connection: %v, want a retryable ErrConnectionLost", err)
	}
	never := c.PublishAsyncAfter(ctx, failedFuture(ErrNotConnected), "q", Message{Body: []byte("d")})
	if _, err := never.Wait(ctx); !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("a publish following one never sent: %v, want ErrConnectionLost", err)
	}
	again := c.PublishAsyncAfter(ctx, nil, "q", Message{Body: []byte("a")})
	s.waitFor("the resend from the first message", func() bool { return s.countLocked(wire.TypePublish) == 3 })
	ps, _ := held()
	if got := string(ps[2].Body); got != "a" {
		t.Fatalf("after the loss the broker received %q first, want the resent %q", got, "a")
	}
	select {
	case <-again.Done():
		t.Fatal("the held resend completed")
	default:
	}
}
