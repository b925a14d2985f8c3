package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
	"github.com/fibril-edge/fibril/internal/wiretest"
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
	c := wiretest.Dial(t, addr, "tok")
	c.Request(t, &wire.Declare{Corr: 1, Queue: "clicks", Durability: wire.DurabilityBuffered})
	c.Request(t, &wire.Publish{Corr: 2, Queue: "clicks", Body: []byte("kept")})
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	// The client gets the server's Goodbye, answers it, and sees the end
	// of the connection.
	var goodbye bool
	for {
		f, err := c.Read()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("after shutdown: %v", err)
			}
			c.NC.Close()
			break
		}
		if g, ok := f.(*wire.Goodbye); ok {
			if g.Reason != "shutting down" {
				t.Fatalf("goodbye %+v", g)
			}
			goodbye = true
			c.Write(&wire.Goodbye{}) // the server may close first
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
	c = wiretest.Dial(t, addr, "tok")
	d := c.Request(t, &wire.Declare{Corr: 1, Queue: "clicks"}).(*wire.Declared)
	if d.Created || d.Durability != wire.DurabilityBuffered {
		t.Fatalf("after restart: %+v", d)
	}
	c.Request(t, &wire.Subscribe{Corr: 2, SubID: 1, Queue: "clicks"})
	if m := c.Next(t).(*wire.Deliver); string(m.Body) != "kept" {
		t.Fatalf("delivered %q", m.Body)
	}
	c.NC.Close()
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
