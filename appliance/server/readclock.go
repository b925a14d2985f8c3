package server

import (
	"net"
	"time"
)

// readClock wraps the connection's reads to keep its read deadline: an
// idle deadline while waiting for a frame, and FrameTimeout from a frame's
// first byte. Only the reader goroutine uses it.
type readClock struct {
	nc           net.Conn
	frameTimeout time.Duration
	started      bool // the current frame has begun (or the deadline is fixed)
}

// arm sets the deadline before a frame is read: the frame timeout if some
// of it is already buffered, else the idle deadline (zero: none).
func (rc *readClock) arm(buffered bool, idle time.Time) {
	rc.started = buffered
	if buffered {
		idle = time.Now().Add(rc.frameTimeout)
	}
	rc.nc.SetReadDeadline(idle)
}

// fixed sets a deadline that reads do not move (the Hello's).
func (rc *readClock) fixed(t time.Time) {
	rc.started = true
	rc.nc.SetReadDeadline(t)
}

func (rc *readClock) inFrame() bool { return rc.started }

func (rc *readClock) Read(p []byte) (int, error) {
	n, err := rc.nc.Read(p)
	if n > 0 && !rc.started {
		rc.started = true
		rc.nc.SetReadDeadline(time.Now().Add(rc.frameTimeout))
	}
	return n, err
}
