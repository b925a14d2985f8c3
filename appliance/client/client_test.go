package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"github.com/fibril-edge/fibril/internal/testcert"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

func TestDialAndClose(t *testing.T) {
	s := newFake(t, func(s *fakeServer) { s.token = "secret" })
	c := dial(t, s, Options{Token: "secret", ClientName: "tester"})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	s.waitFor("hello and goodbye", func() bool {
		return s.countLocked(wire.TypeHello) == 1 && s.countLocked(wire.TypeGoodbye) == 1
	})
	s.mu.Lock()
	h := s.received[0].(*wire.Hello)
	s.mu.Unlock()
	if h.ClientName != "tester" || h.Token != "secret" || h.Version != wire.Version {
		t.Errorf("hello = %v", h)
	}
	if _, err := c.DeclareQueue(testCtx(t), Queue("q")); !errors.Is(err, ErrClosed) {
		t.Errorf("declare after close: %v, want ErrClosed", err)
	}
	if _, err := c.PublishAsync("q", Message{}).Result(); !errors.Is(err, ErrClosed) {
		t.Errorf("publish after close: %v, want ErrClosed", err)
	}
}

func TestDialUnauthorized(t *testing.T) {
	s := newFake(t, func(s *fakeServer) { s.token = "secret" })
	_, err := Dial(testCtx(t), s.addr(), Options{Token: "wrong", Logger: quietLogger()})
	if !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("dial with a wrong token: %v, want ErrUnauthorized", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Code != wire.CodeUnauthorized || e.Message != "wrong token" {
		t.Errorf("error = %#v", e)
	}
	checkNoGoroutines(t)
}

// A broker that accepts and never answers: Dial returns when ctx ends, or
// after DialTimeout.
func TestDialSilentBroker(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- nc
		}
	}()
	defer func() {
		for range len(accepted) {
			(<-accepted).Close()
		}
	}()

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		nc := <-accepted // cancel once the client is waiting for HelloOK
		accepted <- nc
		cancel()
	}()
	_, err = Dial(ctx, ln.Addr().String(), Options{Logger: quietLogger()})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("dial with ctx cancelled: %v, want context.Canceled", err)
	}

	_, err = Dial(context.Background(), ln.Addr().String(), Options{DialTimeout: 50 * time.Millisecond, Logger: quietLogger()})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("dial past DialTimeout: %v, want context.DeadlineExceeded", err)
	}
	checkNoGoroutines(t)
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{
		{DialTimeout: -1},
		{InitialBackoff: time.Second, MaxBackoff: time.Millisecond},
		{MaxInFlight: -1},
		{ClientName: "\xff"},
		{Token: strings.Repeat("x", 70000)},
	} {
		if err := o.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalid", o, err)
		}
		if _, err := Dial(context.Background(), "127.0.0.1:1", o); !errors.Is(err, ErrInvalid) {
			t.Errorf("Dial with %+v: %v, want ErrInvalid", o, err)
		}
	}
	if err := (Options{}).Validate(); err != nil {
		t.Errorf("zero Options: %v", err)
	}
}

func TestDeclare(t *testing.T) {
	s := newFake(t)
	c := dial(t, s, Options{})

	r := declare(t, c, Queue("clicks").Buffered().Partitions(4).DedupeWindow(time.Minute).MaxMessages(10).DropOldest())
	if !r.Created || r.Durability != Buffered || r.Partitions != 4 || r.Queue != "clicks" || r.Warning == "" {
		t.Errorf("first declare = %+v", r)
	}
	s.mu.Lock()
	d := s.received[len(s.received)-1].(*wire.Declare)
	s.mu.Unlock()
	want := wire.Declare{Corr: d.Corr, Queue: "clicks", Durability: wire.DurabilityBuffered, Partitions: 4,
		DedupeWindowMillis: 60000, MaxMessages: 10, Overflow: wire.OverflowDropOldest}
	if *d != want {
		t.Errorf("Declare frame = %+v, want %+v", *d, want)
	}

	r = declare(t, c, Queue("clicks")) // no mode: keeps buffered
	if r.Created || r.Durability != Buffered {
		t.Errorf("re-declare without a mode = %+v", r)
	}
	_, err := c.DeclareQueue(testCtx(t), Queue("clicks").Durable())
	if !errors.Is(err, ErrConflict) || IsRetryable(err) {
		t.Errorf("declare with the other mode: %v, want ErrConflict", err)
	}
	if r := declare(t, c, Queue("orders")); r.Durability != Durable || r.Warning != "" {
		t.Errorf("new queue without a mode = %+v, want durable without a warning", r)
	}
}

func TestQueueConfigInvalid(t *testing.T) {
	s := newFake(t)
	c := dial(t, s, Options{})
	for _, q := range []QueueConfig{
		Queue(""),
		Queue("q").Partitions(0),
		Queue("q").Partitions(70000),
		Queue("q").AckDeadline(-time.Second),
		Queue("q").DedupeWindow(60 * 24 * time.Hour),
		Queue("q").MaxDeliveries(0),
		Queue("q").MaxBytes(-1),
		Queue("q").DeadLetter(""),
		Queue("bad\xff"),
	} {
		if _, err := c.DeclareQueue(testCtx(t), q); !errors.Is(err, ErrInvalid) {
			t.Errorf("declare %s: %v, want ErrInvalid", q, err)
		}
	}
	s.mu.Lock()
	n := s.countLocked(wire.TypeDeclare)
	s.mu.Unlock()
	if n != 0 {
		t.Errorf("%d invalid declares were sent", n)
	}
	// A sub-millisecond duration rounds up, never to 0 ("unspecified").
	if got := Queue("q").AckDeadline(time.Microsecond).d.AckDeadlineMillis; got != 1 {
		t.Errorf("AckDeadline(1µs) = %d ms, want 1", got)
	}
}

// The broker's Error with Corr 0 closes the connection; requests in flight
// fail with it as the cause.
func TestConnectionErrorFromBroker(t *testing.T) {
	s := newFake(t, func(s *fakeServer) {
		s.onFrame = func(fc *fakeConn, f wire.Frame) bool {
			if p, ok := f.(*wire.Publish); ok && p.Queue == "poison" {
				fc.send(&wire.Error{Code: wire.CodeInternal, Message: "broker bug"})
				fc.nc.Close()
				return false
			}
			return true
		}
	})
	c := dial(t, s, Options{DisableReconnect: true})
	declare(t, c, Queue("q"))
	cons, err := c.Consume(testCtx(t), "q", 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Publish(testCtx(t), "poison", Message{Body: []byte("x")})
	if !errors.Is(err, ErrConnectionLost) || !errors.Is(err, ErrInternal) {
		t.Errorf("publish: %v, want ErrConnectionLost caused by ErrInternal", err)
	}
	// Reconnect is off: every later call fails with the loss.
	_, err = c.DeclareQueue(testCtx(t), Queue("q"))
	if !errors.Is(err, ErrConnectionLost) {
		t.Errorf("declare after the loss: %v, want ErrConnectionLost", err)
	}
	waitDone(t, cons.Done(), "the consumer to end")
	if err := cons.Err(); !errors.Is(err, ErrConnectionLost) {
		t.Errorf("consumer ended with %v, want ErrConnectionLost", err)
	}
}

// Over TLS the frames are the same; the client fills ServerName from the
// address when the config leaves it empty.
func TestTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	s := newFake(t, func(s *fakeServer) { s.tls = &tls.Config{Certificates: []tls.Certificate{cert}} })
	c := dial(t, s, Options{TLS: &tls.Config{RootCAs: pool}})
	if r := declare(t, c, Queue("q")); !r.Created {
		t.Errorf("declare over TLS = %+v", r)
	}
	// A client that does not trust the certificate cannot connect.
	_, err := Dial(testCtx(t), s.addr(), Options{TLS: &tls.Config{}, Logger: quietLogger()})
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("dial with an untrusted certificate: %v", err)
	}
}

// selfSigned makes a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) { return testcert.SelfSigned(t) }
