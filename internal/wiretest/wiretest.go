// Package wiretest is a raw client-protocol connection for tests that
// speak frames to a running server (fibrild's and the daemon's tests).
package wiretest

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// Wait bounds every dial and read.
const Wait = 60 * time.Second

// Conn is a connection that has said Hello.
type Conn struct {
	NC net.Conn
	r  *wire.Reader
	w  *wire.Writer
}

// Dial connects to addr and says Hello with token ("" for none); the
// connection closes when the test ends.
func Dial(t testing.TB, addr, token string) *Conn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, Wait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	c := &Conn{NC: nc, r: wire.NewReader(nc, wire.Options{}), w: wire.NewWriter(nc, wire.Options{})}
	c.Request(t, &wire.Hello{Version: wire.Version, Token: token, ClientName: "wiretest"})
	return c
}

// Write writes and flushes one frame and returns the error, for a peer
// that may already be closing.
func (c *Conn) Write(f wire.Frame) error {
	if err := c.w.WriteFrame(f); err != nil {
		return err
	}
	return c.w.Flush()
}

// Send writes and flushes one frame, failing the test on an error.
func (c *Conn) Send(t testing.TB, f wire.Frame) {
	t.Helper()
	if err := c.Write(f); err != nil {
		t.Fatal(err)
	}
}

// Read reads one frame, heartbeats included, and returns the read's error
// (io.EOF once the server has closed).
func (c *Conn) Read() (wire.Frame, error) {
	c.NC.SetReadDeadline(time.Now().Add(Wait))
	return c.r.ReadFrame()
}

// Next returns the next frame that is not a Heartbeat.
func (c *Conn) Next(t testing.TB) wire.Frame {
	t.Helper()
	for {
		f, err := c.Read()
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if _, hb := f.(*wire.Heartbeat); !hb {
			return f
		}
	}
}

// Request sends f and returns the next frame, failing on an Error.
func (c *Conn) Request(t testing.TB, f wire.Frame) wire.Frame {
	t.Helper()
	c.Send(t, f)
	got := c.Next(t)
	if e, ok := got.(*wire.Error); ok {
		t.Fatalf("%s: %v", f.Type(), e)
	}
	return got
}

// DrainUntilClosed reads until the server ends the connection.
func (c *Conn) DrainUntilClosed(t testing.TB) {
	t.Helper()
	for {
		if _, err := c.Read(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("waiting for the server to close: %v", err)
			}
			c.NC.Close()
			return
		}
	}
}
