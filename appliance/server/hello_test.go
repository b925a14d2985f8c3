package server

import (
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

func TestHello(t *testing.T) {
	ts := startServer(t, Options{Tokens: []string{"alpha", "s3cr3t"}, HelloTimeout: 300 * time.Millisecond,
		Heartbeat: 5 * time.Second, ServerName: "edge-test"})

	t.Run("good token", func(t *testing.T) {
		c := dial(t, ts.addr)
		c.send(&wire.Hello{Version: wire.Version, Token: "s3cr3t", ClientName: "good"})
		ok, isOK := c.read().(*wire.HelloOK)
		if !isOK {
			t.Fatal("want HelloOK")
		}
		if ok.Version != wire.Version || ok.ServerName != "edge-test" || ok.MaxFrame != wire.DefaultMaxFrame ||
			ok.HeartbeatMillis != 5000 || ok.SessionID == 0 {
			t.Fatalf("HelloOK %+v", ok)
		}
		// The connection works.
		d := c.declare(&wire.Declare{Queue: "q"})
		if d.Durability != wire.DurabilityDurable {
			t.Fatalf("declared %+v", d)
		}
	})
	t.Run("newer client version", func(t *testing.T) {
		c := dial(t, ts.addr)
		c.send(&wire.Hello{Version: 7, Token: "alpha"})
		if ok := c.read().(*wire.HelloOK); ok.Version != wire.Version {
			t.Fatalf("negotiated version %d, want %d", ok.Version, wire.Version)
		}
	})
	t.Run("sessions differ", func(t *testing.T) {
		a, b := connectSession(t, ts.addr), connectSession(t, ts.addr)
		if a == b {
			t.Fatalf("two connections got session %d", a)
		}
	})

	for _, tc := range []struct {
		name  string
		hello wire.Frame
		code  wire.ErrorCode
	}{
		{"wrong token", &wire.Hello{Version: 1, Token: "s3cr3T"}, wire.CodeUnauthorized},
		{"missing token", &wire.Hello{Version: 1}, wire.CodeUnauthorized},
		{"token prefix", &wire.Hello{Version: 1, Token: "s3cr"}, wire.CodeUnauthorized},
		{"unsupported version", &wire.Hello{Version: 0, Token: "alpha"}, wire.CodeUnsupportedVersion},
		{"publish first", &wire.Publish{Corr: 1, Queue: "q", Body: []byte("x")}, wire.CodeBadRequest},
		{"heartbeat first", &wire.Heartbeat{}, wire.CodeBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, ts.addr)
			c.send(tc.hello)
			c.expectFatal(tc.code)
		})
	}

	t.Run("second hello", func(t *testing.T) {
		c := connect(t, ts.addr, "alpha")
		c.send(&wire.Hello{Version: 1, Token: "alpha"})
		c.expectFatal(wire.CodeBadRequest)
	})
	t.Run("no hello", func(t *testing.T) {
		c := dial(t, ts.addr)
		start := time.Now()
		if got := c.expectClosed(); len(got) != 0 {
			t.Fatalf("server sent %v before any Hello", got)
		}
		if waited := time.Since(start); waited < 250*time.Millisecond {
			t.Fatalf("closed after %v, before the hello timeout", waited)
		}
	})
	t.Run("hello too large", func(t *testing.T) {
		c := dial(t, ts.addr)
		c.nc.Write([]byte{0x00, 0x10, 0x00, 0x00, byte(wire.TypeHello)}) // 1 MiB hello
		c.expectFatal(wire.CodeTooLarge)
	})
}

func connectSession(t *testing.T, addr string) uint64 {
	c := dial(t, addr)
	c.send(&wire.Hello{Version: 1, Token: "alpha"})
	return c.read().(*wire.HelloOK).SessionID
}

func TestNoTokensAcceptsAnyToken(t *testing.T) {
	ts := startServer(t, Options{})
	for _, tok := range []string{"", "anything"} {
		connect(t, ts.addr, tok)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{
		{MaxFrame: 100},
		{MaxFrame: 2 << 30},
		{Heartbeat: time.Microsecond},
		{Heartbeat: 2 * time.Hour},
		{HelloTimeout: -1},
		{Tokens: []string{""}},
		{ServerName: "\xff"},
		{MaxPreHello: -1},
		{MaxPreHelloPerSource: MaxPreHelloLimit + 1},
		{PressureHelloTimeout: -time.Second},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v: Validate accepted it", o)
		}
	}
	for _, o := range []Options{{}, {Heartbeat: -1}, {MaxFrame: 4096, Tokens: []string{"t"}}} {
		if err := o.Validate(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
	// The per-source limit never passes the total, nor the pressure
	// timeout the Hello timeout.
	o := Options{MaxPreHello: 10, MaxPreHelloPerSource: 64, HelloTimeout: 500 * time.Millisecond}.withDefaults()
	if o.MaxPreHelloPerSource != 10 || o.PressureHelloTimeout != 500*time.Millisecond {
		t.Errorf("defaults: per source %d, pressure timeout %v", o.MaxPreHelloPerSource, o.PressureHelloTimeout)
	}
}
