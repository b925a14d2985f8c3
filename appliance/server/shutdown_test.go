package server

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// Shutdown says Goodbye, answers every publish already read, closes the
// connections, and the deliveries they held become ready again.
func TestShutdown(t *testing.T) {
	ts := startServer(t, Options{})
	cons := connect(t, ts.addr, "")
	cons.declare(&wire.Declare{Queue: "q", Durability: wire.DurabilityBuffered})
	pub := connect(t, ts.addr, "")
	for i := range 3 {
		pub.publish("q", []byte(fmt.Sprint(i)))
	}
	// Prefetch 3: the consumer holds the three and is sent nothing more,
	// so all it may see at shutdown is the Goodbye (with more credit, a
	// late publish confirmed before the shutdown could reach it first).
	cons.subscribe(1, "q", 3)
	for range 3 {
		cons.deliver()
	}

	// Publishes in flight while the server shuts down each get exactly one
	// answer: a Confirm, or Unavailable if read after the Goodbye.
	const n = 200
	for range n {
		pub.w.WriteFrame(&wire.Publish{Corr: pub.nextCorr(), Queue: "q", Body: []byte("late")})
	}
	pub.send()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := ts.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}

	answered := make(map[uint64]bool)
	var goodbye bool
	for _, f := range pub.closeGracefully() {
		switch f := f.(type) {
		case *wire.Confirm:
			answered[f.Corr] = !answered[f.Corr]
		case *wire.Error:
			if f.Code != wire.CodeUnavailable || f.Corr == 0 {
				t.Fatalf("error %+v", f)
			}
			answered[f.Corr] = !answered[f.Corr]
		case *wire.Goodbye:
			if goodbye {
				t.Fatal("two Goodbyes")
			}
			goodbye = true
		default:
			t.Fatalf("unexpected %#v", f)
		}
	}
	if !goodbye {
		t.Fatal("publisher got no Goodbye")
	}
	for corr := uint64(4); corr < 4+n; corr++ {
		if !answered[corr] {
			t.Fatalf("publish %d answered %v times", corr, answered[corr])
		}
	}
	// The consumer does not answer the Goodbye: the server closes after
	// its grace period.
	got := cons.expectClosed()
	if len(got) != 1 {
		t.Fatalf("consumer got %v, want only Goodbye", got)
	}
	if g, ok := got[0].(*wire.Goodbye); !ok || g.Reason != "shutting down" {
		t.Fatalf("consumer got %#v", got[0])
	}
	if n := ts.Connections(); n != 0 {
		t.Fatalf("%d connections after Shutdown", n)
	}
	info, err := ts.b.QueueInfo("q")
	if err != nil {
		t.Fatal(err)
	}
	if info.InFlight != 0 || info.Ready != info.Messages || info.Messages < 3 {
		t.Fatalf("after shutdown: %d messages, %d ready, %d in flight", info.Messages, info.Ready, info.InFlight)
	}
}

// A client's Goodbye gets the replies it is owed, then the server's
// Goodbye, then the end of the connection.
func TestClientGoodbye(t *testing.T) {
	ts := startServer(t, Options{})
	c := connect(t, ts.addr, "")
	c.declare(&wire.Declare{Queue: "q"})
	for range 20 {
		c.w.WriteFrame(&wire.Publish{Corr: c.nextCorr(), Queue: "q", Body: []byte("x")})
	}
	c.send(&wire.Goodbye{Reason: "done"})
	got := c.expectClosed()
	if len(got) != 21 {
		t.Fatalf("got %d frames, want 20 confirms and a Goodbye", len(got))
	}
	for _, f := range got[:20] {
		if _, ok := f.(*wire.Confirm); !ok {
			t.Fatalf("got %#v, want Confirm", f)
		}
	}
	if _, ok := got[20].(*wire.Goodbye); !ok {
		t.Fatalf("last frame %#v, want Goodbye", got[20])
	}
}

// A client that stops reading is closed once writes to it stall for
// WriteTimeout; the deliveries it held become ready again, and the broker's
// other clients carry on.
func TestClientThatStopsReadingIsClosed(t *testing.T) {
	ts := startServer(t, Options{WriteTimeout: 200 * time.Millisecond})
	pub := connect(t, ts.addr, "")
	pub.declare(&wire.Declare{Queue: "big", Durability: wire.DurabilityBuffered})

	stuck := connect(t, ts.addr, "")
	stuck.nc.(*net.TCPConn).SetReadBuffer(16 << 10)
	stuck.subscribe(1, "big", 1<<20)
	// stuck never reads again. Publish until the socket buffers between
	// the server and stuck are full and the server gives up on it.
	body := bytes.Repeat([]byte("b"), 256<<10)
	published := 0
	for ts.Connections() == 2 {
		if published == 400 { // 100 MiB
			t.Fatal("the server kept writing to a client that does not read")
		}
		for range 4 {
			pub.w.WriteFrame(&wire.Publish{Corr: pub.nextCorr(), Queue: "big", Body: body})
		}
		pub.send()
		for range 4 {
			if _, ok := pub.read().(*wire.Confirm); !ok {
				t.Fatal("want Confirm")
			}
		}
		published += 4
	}
	waitFor(t, "the stalled connection to close", func() bool { return ts.Connections() == 1 })
	waitFor(t, "its deliveries to be released", func() bool {
		info, _ := ts.b.QueueInfo("big")
		return info.InFlight == 0 && info.Ready == int64(published)
	})
	t.Logf("closed after %d MiB were published", published/4)
	pub.declare(&wire.Declare{Queue: "big"})
}
