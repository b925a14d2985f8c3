package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// The states fibrild sends.
const (
	StateReady    = "READY=1"
	StateStopping = "STOPPING=1"
	StateWatchdog = "WATCHDOG=1"
)

// Notify sends state (one or more newline-separated assignments) to
// $NOTIFY_SOCKET. It returns nil without sending when the variable is
// unset.
func Notify(state string) error {
	return NotifySocket(os.Getenv("NOTIFY_SOCKET"), state)
}

// NotifySocket sends state to the socket at path ("@name" for an abstract
// socket). An empty path is a no-op.
func NotifySocket(path, state string) error {
	if path == "" {
		return nil
	}
	addr := &net.UnixAddr{Name: path, Net: "unixgram"}
	if path[0] == '@' {
		addr.Name = "\x00" + path[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, addr)
	if err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	return nil
}

// Ready tells systemd that start-up is finished.
func Ready() error { return Notify(StateReady) }

// Stopping tells systemd that the service is shutting down.
func Stopping() error { return Notify(StateStopping) }

// Watchdog pings the service watchdog.
func Watchdog() error { return Notify(StateWatchdog) }

// WatchdogInterval returns the watchdog timeout systemd set for this
// process (WATCHDOG_USEC, honoured only when WATCHDOG_PID is unset or names
// this process), and 0 when there is none. Pings should come at half of it.
func WatchdogInterval() (time.Duration, error) {
	return watchdogInterval(os.Getenv("WATCHDOG_USEC"), os.Getenv("WATCHDOG_PID"), os.Getpid())
}

var errBadWatchdog = errors.New("sdnotify: bad watchdog variables")

func watchdogInterval(usec, pid string, self int) (time.Duration, error) {
	if usec == "" {
		return 0, nil
	}
	if pid != "" {
		p, err := strconv.Atoi(pid)
		if err != nil {
			return 0, fmt.Errorf("%w: WATCHDOG_PID=%q", errBadWatchdog, pid)
		}
		if p != self {
			return 0, nil // meant for another process
		}
	}
	us, err := strconv.ParseInt(usec, 10, 64)
	if err != nil || us <= 0 {
		return 0, fmt.Errorf("%w: WATCHDOG_USEC=%q", errBadWatchdog, usec)
	}
	return time.Duration(us) * time.Microsecond, nil
}
