package sdnotify

import (
	"errors"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// listen opens a unixgram socket for the test and returns its path.
func listen(t *testing.T, name string) (*net.UnixConn, string) {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, name
}

func receive(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

func TestNotifyPathSocket(t *testing.T) {
	conn, path := listen(t, filepath.Join(t.TempDir(), "notify.sock"))
	t.Setenv("NOTIFY_SOCKET", path)
	for _, c := range []struct {
		send func() error
		want string
	}{{Ready, "READY=1"}, {Watchdog, "WATCHDOG=1"}, {Stopping, "STOPPING=1"}} {
		if err := c.send(); err != nil {
			t.Fatal(err)
		}
		if got := receive(t, conn); got != c.want {
			t.Fatalf("got %q, want %q", got, c.want)
		}
	}
}

func TestNotifyAbstractSocket(t *testing.T) {
	name := "@fibril-sdnotify-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	conn, _ := listen(t, "\x00"+name[1:])
	t.Setenv("NOTIFY_SOCKET", name)
	if err := Ready(); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, conn); got != "READY=1" {
		t.Fatalf("got %q", got)
	}
}

func TestNotifyUnsetIsNoop(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if err := Ready(); err != nil {
		t.Fatalf("Ready without NOTIFY_SOCKET: %v", err)
	}
}

func TestNotifyMissingSocketFails(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "absent.sock"))
	if err := Ready(); err == nil {
		t.Fatal("Ready to a missing socket succeeded")
	}
}

func TestWatchdogInterval(t *testing.T) {
	for _, c := range []struct {
		usec, pid string
		want      time.Duration
		bad       bool
	}{
		{"", "", 0, false},
		{"30000000", "", 30 * time.Second, false},
		{"30000000", "42", 30 * time.Second, false},
		{"30000000", "43", 0, false}, // another process's watchdog
		{"x", "", 0, true},
		{"0", "", 0, true},
		{"30000000", "x", 0, true},
	} {
		got, err := watchdogInterval(c.usec, c.pid, 42)
		if got != c.want || (err != nil) != c.bad {
			t.Errorf("watchdogInterval(%q, %q) = %v, %v; want %v, bad=%v", c.usec, c.pid, got, err, c.want, c.bad)
		}
		if err != nil && !errors.Is(err, errBadWatchdog) {
			t.Errorf("error %v is not errBadWatchdog", err)
		}
	}
	t.Setenv("WATCHDOG_USEC", "2000000")
	t.Setenv("WATCHDOG_PID", "")
	if d, err := WatchdogInterval(); d != 2*time.Second || err != nil {
		t.Fatalf("WatchdogInterval = %v, %v", d, err)
	}
}
