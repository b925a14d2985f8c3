package daemon

import (
	"context"
	"errors"
	"github.com/fibril-edge/fibril/internal/wiretest"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// notifySocket listens on a unixgram socket in a temp dir and points
// NOTIFY_SOCKET at it.
func notifySocket(t *testing.T) *net.UnixConn {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return conn
}

func nextState(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	conn.SetReadDeadline(time.Now().Add(waitLimit))
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return string(buf[:n])
}

// Under a fake systemd, Run sends READY=1 once it listens, watchdog pings
// at half WATCHDOG_USEC while it runs, and STOPPING=1 at shutdown.
func TestRunNotifiesSystemd(t *testing.T) {
	conn := notifySocket(t)
	t.Setenv("WATCHDOG_USEC", "100000") // 100ms: pings every 50ms
	t.Setenv("WATCHDOG_PID", "")
	cfg := Default()
	cfg.Server.Listen = "127.0.0.1:0"
	cfg.Storage.DataDir = t.TempDir()
	cfg.Storage.MinFree = 0

	addr, stop := startRun(t, cfg)
	if got := nextState(t, conn); got != "READY=1" {
		t.Fatalf("first notification %q, want READY=1", got)
	}
	// READY came after the listener was bound.
	wiretest.Dial(t, addr, "").NC.Close()
	for i := 0; i < 3; i++ {
		if got := nextState(t, conn); got != "WATCHDOG=1" {
			t.Fatalf("notification %q, want WATCHDOG=1", got)
		}
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	for {
		got := nextState(t, conn)
		if got == "STOPPING=1" {
			break
		}
		if got != "WATCHDOG=1" {
			t.Fatalf("notification %q while stopping", got)
		}
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}

// The watchdog loop pings only on ticks where the storage path is
// healthy: none while a log is latched (or the check fails otherwise).
func TestWatchdogLoopPingsOnlyWhileHealthy(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	tick := make(chan time.Time)
	healthCh := make(chan error)
	pings := make(chan struct{}, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchdogLoop(ctx, tick, func() error { return <-healthCh },
			func() error { pings <- struct{}{}; return nil }, slog.New(slog.DiscardHandler))
	}()
	latched := errors.New("queue q partition 0 log latched")
	want := 0
	for i, health := range []error{nil, nil, latched, latched, nil} {
		tick <- time.Now()
		// The loop takes a tick only after finishing the last one, so the
		// earlier ticks' pings are all counted now.
		if got := len(pings); got != want {
			t.Fatalf("before tick %d: %d pings, want %d", i, got, want)
		}
		healthCh <- health
		if health == nil {
			want++
		}
	}
	cancel()
	<-done
	if got := len(pings); got != want {
		t.Fatalf("%d pings, want %d (one per healthy tick, none while latched)", got, want)
	}
}
