package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

const waitLimit = 20 * time.Second

// listenWatcher is a slog handler that reports the addresses of the
// "listening" records (proto=fibril on addr, proto=admin on admin) and
// drops everything else.
type listenWatcher struct {
	addr, admin chan string
}

func (h listenWatcher) Enabled(context.Context, slog.Level) bool { return true }
func (h listenWatcher) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h listenWatcher) WithGroup(string) slog.Handler            { return h }
func (h listenWatcher) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "listening" {
		var proto, addr string
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "proto":
				proto = a.Value.String()
			case "addr":
				addr = a.Value.String()
			}
			return true
		})
		switch proto {
		case "fibril":
			h.addr <- addr
		case "admin":
			h.admin <- addr
		}
	}
	return nil
}

// startRun runs Run in the background and returns the address it listens
// on and a function that stops it and returns Run's error.
func startRun(t *testing.T, cfg Config) (string, func() error) {
	t.Helper()
	addr, _, stop := startRunAdmin(t, cfg)
	return addr, stop
}

// startRunAdmin is startRun that also returns the admin API's address
// ("" when cfg turns it off). An admin address of the default port is
// replaced by port 0.
func startRunAdmin(t *testing.T, cfg Config) (string, string, func() error) {
	t.Helper()
	if cfg.Admin.Listen == Default().Admin.Listen {
		cfg.Admin.Listen = "127.0.0.1:0"
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := listenWatcher{addr: make(chan string, 1), admin: make(chan string, 1)}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, slog.New(w)) }()
	stop := func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(waitLimit):
			return errors.New("Run did not return after its context ended")
		}
	}
	var addr, admin string
	for addr == "" || (admin == "" && cfg.Admin.Listen != "") {
		select {
		case addr = <-w.addr:
		case admin = <-w.admin:
		case err := <-done:
			cancel()
			t.Fatalf("Run: %v", err)
		case <-time.After(waitLimit):
			cancel()
			t.Fatal("Run never listened")
		}
	}
	return addr, admin, stop
}

func TestRunServesAndShutsDownCleanly(t *testing.T) {
	cfg := Default()
	cfg.Server.Listen = "127.0.0.1:0"
	cfg.Server.Tokens = []string{"tok"}
	cfg.Storage.DataDir = t.TempDir()
	cfg.Storage.MinFree = 0

	addr, stop := startRun(t, cfg)
	c := dialHello(t, addr, "tok")
	c.roundTrip(t, &wire.Declare{Corr: 1, Queue: "clicks", Durability: wire.DurabilityBuffered})
	c.roundTrip(t, &wire.Publish{Corr: 2, Queue: "clicks", Body: []byte("kept")})
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	// The client gets the server's Goodbye, answers it, and sees the end
	// of the connection.
	c.nc.SetReadDeadline(time.Now().Add(waitLimit))
	var goodbye bool
	for {
		f, err := c.r.ReadFrame()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("after shutdown: %v", err)
			}
			c.nc.Close()
			break
		}
		if g, ok := f.(*wire.Goodbye); ok {
			if g.Reason != "shutting down" {
				t.Fatalf("goodbye %+v", g)
			}
			goodbye = true
			c.w.WriteFrame(&wire.Goodbye{})
			c.w.Flush()
		}
	}
	if !goodbye {
		t.Fatal("no Goodbye from the server")
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Run after shutdown: %v", err)
	}

	// A restart has the queue, its mode, and the message.
	addr, stop = startRun(t, cfg)
	c = dialHello(t, addr, "tok")
	d := c.roundTrip(t, &wire.Declare{Corr: 1, Queue: "clicks"}).(*wire.Declared)
	if d.Created || d.Durability != wire.DurabilityBuffered {
		t.Fatalf("after restart: %+v", d)
	}
	c.roundTrip(t, &wire.Subscribe{Corr: 2, SubID: 1, Queue: "clicks"})
	if m := c.read(t).(*wire.Deliver); string(m.Body) != "kept" {
		t.Fatalf("delivered %q", m.Body)
	}
	c.nc.Close()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestRunRefusesBadConfig(t *testing.T) {
	cfg := Default()
	cfg.Storage.DataDir = ""
	if err := Run(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil {
		t.Fatal("Run accepted a config without a data directory")
	}
	cfg = Default()
	cfg.Storage.DataDir = t.TempDir()
	cfg.Server.TLSCert, cfg.Server.TLSKey = "/nonexistent/cert.pem", "/nonexistent/key.pem"
	if err := Run(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil {
		t.Fatal("Run accepted a missing TLS certificate")
	}
}

type testConn struct {
	nc net.Conn
	r  *wire.Reader
	w  *wire.Writer
}

func dialHello(t *testing.T, addr, token string) *testConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, waitLimit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	c := &testConn{nc: nc, r: wire.NewReader(nc, wire.Options{}), w: wire.NewWriter(nc, wire.Options{})}
	c.roundTrip(t, &wire.Hello{Version: wire.Version, Token: token})
	return c
}

func (c *testConn) read(t *testing.T) wire.Frame {
	t.Helper()
	for {
		c.nc.SetReadDeadline(time.Now().Add(waitLimit))
		f, err := c.r.ReadFrame()
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if _, hb := f.(*wire.Heartbeat); !hb {
			return f
		}
	}
}

// roundTrip sends a request and returns its answer, failing on an Error.
func (c *testConn) roundTrip(t *testing.T, f wire.Frame) wire.Frame {
	t.Helper()
	if err := c.w.WriteFrame(f); err != nil {
		t.Fatal(err)
	}
	if err := c.w.Flush(); err != nil {
		t.Fatal(err)
	}
	got := c.read(t)
	if e, ok := got.(*wire.Error); ok {
		t.Fatalf("%s: %v", f.Type(), e)
	}
	return got
}
