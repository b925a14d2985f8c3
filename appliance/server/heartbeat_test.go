package server

import (
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// A client that sends nothing is closed after three heartbeat intervals;
// the server sends heartbeats to it meanwhile.
func TestHeartbeatTimeoutClosesSilentClient(t *testing.T) {
	const hb = 100 * time.Millisecond
	ts := startServer(t, Options{Heartbeat: hb})
	c := dial(t, ts.addr)
	// The clock starts before the Hello goes out: the server arms its idle
	// deadline only after reading it, so the close cannot come sooner
	// than 3 × hb after this instant.
	start := time.Now()
	c.send(&wire.Hello{Version: 1})
	var beats int
	for {
		f, err := c.readErr()
		if err != nil {
			break
		}
		switch f.(type) {
		case *wire.HelloOK:
		case *wire.Heartbeat:
			beats++
		default:
			t.Fatalf("unexpected %#v", f)
		}
	}
	if waited := time.Since(start); waited < 3*hb {
		t.Fatalf("closed after %v, before 3 × %v of silence", waited, hb)
	}
	if beats < 2 {
		t.Fatalf("server sent %d heartbeats in 3 intervals, want at least 2", beats)
	}
}

// A client that answers heartbeats stays connected for many intervals.
func TestHeartbeatsKeepConnectionAlive(t *testing.T) {
	const hb = 50 * time.Millisecond
	ts := startServer(t, Options{Heartbeat: hb})
	c := connect(t, ts.addr, "")
	for beats := 0; beats < 10; {
		f, err := c.readErr()
		if err != nil {
			t.Fatalf("after %d heartbeats: %v", beats, err)
		}
		if _, ok := f.(*wire.Heartbeat); !ok {
			t.Fatalf("unexpected %#v", f)
		}
		beats++
		c.send(&wire.Heartbeat{})
	}
	c.declare(&wire.Declare{Queue: "still-here"})
}

// With heartbeats off, HelloOK says 0 and an idle client is not closed:
// a request after an idle stretch still works.
func TestHeartbeatsOff(t *testing.T) {
	ts := startServer(t, Options{Heartbeat: -1})
	c := dial(t, ts.addr)
	c.send(&wire.Hello{Version: 1})
	if ok := c.read().(*wire.HelloOK); ok.HeartbeatMillis != 0 {
		t.Fatalf("HeartbeatMillis %d, want 0", ok.HeartbeatMillis)
	}
	c.declare(&wire.Declare{Queue: "q"})
}
