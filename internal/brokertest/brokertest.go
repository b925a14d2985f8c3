// Package brokertest runs a real broker behind a real wire server on
// loopback, in process, for the tests of packages that talk to it as a
// client (the Go client's integration tests, the bridge).
package brokertest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/server"
)

// Quiet is a logger that drops everything.
func Quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// LogBuffer is a log destination that goroutines share, for a test that
// reads back what was logged.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Logger is a text logger writing to l.
func (l *LogBuffer) Logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// Open opens a broker on a temporary directory, closed at the end of the
// test (after the servers registered later have shut down).
func Open(t testing.TB) *appliance.Broker {
	t.Helper()
	b, err := appliance.Open(appliance.Options{DataDir: t.TempDir(), MinFreeBytes: -1, Logger: Quiet()})
	if err != nil {
		t.Fatalf("open broker: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("close broker: %v", err)
		}
	})
	return b
}

// Serve runs a server for b on ln; shutdown (also run at the end of the
// test) stops it gracefully and checks that Serve ended as it should.
func Serve(t testing.TB, b *appliance.Broker, ln net.Listener) (shutdown func()) {
	t.Helper()
	srv, err := server.New(b, server.Options{Logger: Quiet()})
	if err != nil {
		t.Fatalf("new server: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	var once sync.Once
	shutdown = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil {
				t.Errorf("server shutdown: %v", err)
			}
			if err := <-served; !errors.Is(err, server.ErrServerClosed) {
				t.Errorf("Serve: %v", err)
			}
		})
	}
	t.Cleanup(shutdown)
	return shutdown
}

// Start opens a broker and serves it on a free loopback port; it returns
// the broker and the address.
func Start(t testing.TB) (*appliance.Broker, string) {
	t.Helper()
	b := Open(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	Serve(t, b, ln)
	return b, ln.Addr().String()
}
