package server

import (
	"context"
	"errors"
	"github.com/fibril-edge/fibril/internal/await"
	"io"
	"log/slog"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/wire"
)

// waitLimit bounds every wait in these tests; none is expected to come
// close to it.
const waitLimit = 20 * time.Second

// testLinger replaces the server's linger time (2 s) so that a client
// that neither answers Goodbye nor closes does not hold a test up.
const testLinger = 200 * time.Millisecond

// testLogger discards logs unless FIBRIL_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("FIBRIL_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type testServer struct {
	*Server
	b    *appliance.Broker
	addr string
}

// startServer runs a server with a real broker on a temporary directory.
// Cleanup shuts both down and checks that Serve ended as it should.
func startServer(t *testing.T, opts Options) *testServer {
	t.Helper()
	return startServerOn(t, opts, nil)
}

// startServerOn is startServer with the listener wrapped by wrap (nil:
// as it is).
func startServerOn(t *testing.T, opts Options, wrap func(net.Listener) net.Listener) *testServer {
	t.Helper()
	b, err := appliance.Open(appliance.Options{DataDir: t.TempDir(), MinFreeBytes: -1, Logger: testLogger()})
	if err != nil {
		t.Fatalf("open broker: %v", err)
	}
	return serveBroker(t, b, opts, wrap)
}

// serveBroker runs a server for b, which cleanup closes after the server.
func serveBroker(t *testing.T, b *appliance.Broker, opts Options, wrap func(net.Listener) net.Listener) *testServer {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	s, err := New(b, opts)
	if err != nil {
		t.Fatalf("new server: %v", err)
	}
	s.linger = testLinger
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	if wrap != nil {
		ln = wrap(ln)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
		if err := b.Close(); err != nil {
			t.Errorf("close broker: %v", err)
		}
	})
	return &testServer{Server: s, b: b, addr: ln.Addr().String()}
}

// client speaks the protocol with raw frames.
type client struct {
	t    testing.TB
	nc   net.Conn
	r    *wire.Reader
	w    *wire.Writer
	corr uint64
}

func dial(t testing.TB, addr string) *client {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, waitLimit)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { nc.Close() })
	return &client{t: t, nc: nc, r: wire.NewReader(nc, wire.Options{}), w: wire.NewWriter(nc, wire.Options{})}
}

// connect dials and completes a Hello with token.
func connect(t testing.TB, addr, token string) *client {
	t.Helper()
	c := dial(t, addr)
	c.send(&wire.Hello{Version: wire.Version, Token: token, ClientName: t.Name()})
	ok, isOK := c.read().(*wire.HelloOK)
	if !isOK {
		t.Fatalf("hello: want HelloOK")
	}
	c.r.SetMaxFrame(int(ok.MaxFrame))
	c.w.SetMaxFrame(int(ok.MaxFrame))
	return c
}

func (c *client) nextCorr() uint64 {
	c.corr++
	return c.corr
}

// send writes frames and flushes them.
func (c *client) send(fs ...wire.Frame) {
	c.t.Helper()
	for _, f := range fs {
		if err := c.w.WriteFrame(f); err != nil {
			c.t.Fatalf("write %s: %v", f.Type(), err)
		}
	}
	if err := c.w.Flush(); err != nil {
		c.t.Fatalf("flush: %v", err)
	}
}

// read returns the next frame other than a Heartbeat.
func (c *client) read() wire.Frame {
	c.t.Helper()
	for {
		f, err := c.readErr()
		if err != nil {
			c.t.Fatalf("read: %v", err)
		}
		if _, hb := f.(*wire.Heartbeat); !hb {
			return f
		}
	}
}

// readErr reads the next frame; a HelloOK sets the version it settled on
// the connection, as a client must.
func (c *client) readErr() (wire.Frame, error) {
	c.nc.SetReadDeadline(time.Now().Add(waitLimit))
	f, err := c.r.ReadFrame()
	if ok, isOK := f.(*wire.HelloOK); isOK {
		c.r.SetVersion(ok.Version)
		c.w.SetVersion(ok.Version)
	}
	return f, err
}

// expectClosed reads until the server closes the connection and returns
// the frames it sent before, heartbeats left out. A timeout fails the test.
func (c *client) expectClosed() []wire.Frame {
	c.t.Helper()
	var got []wire.Frame
	for {
		f, err := c.readErr()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.t.Fatalf("server did not close the connection within %v (frames so far: %v)", waitLimit, got)
			}
			return got
		}
		if _, hb := f.(*wire.Heartbeat); !hb {
			got = append(got, f)
		}
	}
}

// closeGracefully reads until the server closes the connection, answering
// its Goodbye with one, as a well-behaved client does. It returns the
// frames read, heartbeats left out.
func (c *client) closeGracefully() []wire.Frame {
	c.t.Helper()
	var got []wire.Frame
	for {
		f, err := c.readErr()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.t.Fatalf("server did not close the connection within %v", waitLimit)
			}
			return got
		}
		switch f.(type) {
		case *wire.Heartbeat:
			continue
		case *wire.Goodbye:
			c.send(&wire.Goodbye{Reason: "bye"})
		}
		got = append(got, f)
	}
}

// expectError reads the next frame and checks it is an Error with corr and
// code.
func (c *client) expectError(corr uint64, code wire.ErrorCode) *wire.Error {
	c.t.Helper()
	f := c.read()
	e, ok := f.(*wire.Error)
	if !ok || e.Corr != corr || e.Code != code {
		c.t.Fatalf("got %#v, want Error{Corr %d, Code %s}", f, corr, code)
	}
	return e
}

// expectFatal checks that the server answers with Error{Corr 0, code} and
// then closes the connection.
func (c *client) expectFatal(code wire.ErrorCode) {
	c.t.Helper()
	got := c.expectClosed()
	if len(got) == 0 {
		c.t.Fatalf("connection closed without an Error frame, want %s", code)
	}
	e, ok := got[len(got)-1].(*wire.Error)
	if !ok || e.Corr != 0 || e.Code != code {
		c.t.Fatalf("last frame %#v, want Error{Corr 0, Code %s}", got[len(got)-1], code)
	}
}

func (c *client) declare(d *wire.Declare) *wire.Declared {
	c.t.Helper()
	d.Corr = c.nextCorr()
	c.send(d)
	f := c.read()
	r, ok := f.(*wire.Declared)
	if !ok || r.Corr != d.Corr {
		c.t.Fatalf("declare %s: got %#v", d.Queue, f)
	}
	return r
}

// publish publishes one message and waits for its Confirm.
func (c *client) publish(queue string, body []byte) *wire.Confirm {
	c.t.Helper()
	corr := c.nextCorr()
	c.send(&wire.Publish{Corr: corr, Queue: queue, Body: body})
	f := c.read()
	r, ok := f.(*wire.Confirm)
	if !ok || r.Corr != corr {
		c.t.Fatalf("publish to %s: got %#v", queue, f)
	}
	return r
}

func (c *client) subscribe(subID uint32, queue string, prefetch uint32) *wire.Subscribed {
	c.t.Helper()
	corr := c.nextCorr()
	c.send(&wire.Subscribe{Corr: corr, SubID: subID, Queue: queue, Prefetch: prefetch})
	f := c.read()
	r, ok := f.(*wire.Subscribed)
	if !ok || r.Corr != corr || r.SubID != subID {
		c.t.Fatalf("subscribe to %s: got %#v", queue, f)
	}
	return r
}

func (c *client) deliver() *wire.Deliver {
	c.t.Helper()
	f := c.read()
	d, ok := f.(*wire.Deliver)
	if !ok {
		c.t.Fatalf("want Deliver, got %#v", f)
	}
	return d
}

// waitFor waits until cond holds, for at most waitLimit.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	await.Within(t, waitLimit, what, cond)
}

// isReset reports a connection reset by the peer.
func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }
