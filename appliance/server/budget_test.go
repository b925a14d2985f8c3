package server

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// smallSendBuffers gives every accepted connection a fixed 32 KiB send
// buffer, and dialSmallWindow a client a 16 KiB receive buffer: a client
// that does not read then leaves what it is sent queued in the server, not
// in kernel buffers that loopback would otherwise grow to megabytes (and
// whose filling would look like a consumer catching up).
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if tc, ok := nc.(*net.TCPConn); ok && err == nil {
		err = tc.SetWriteBuffer(32 << 10)
	}
	return nc, err
}

func smallBuffers(ln net.Listener) net.Listener { return smallSendBuffers{ln} }

// startBudgetServer runs a server whose connections have small send
// buffers.
func startBudgetServer(t *testing.T, opts Options) *testServer {
	t.Helper()
	return startServerOn(t, opts, smallBuffers)
}
func dialSmallWindow(t *testing.T, addr string) *client {
	t.Helper()
	d := net.Dialer{Timeout: waitLimit, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10) })
		return errors.Join(err, serr)
	}}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { nc.Close() })
	c := &client{t: t, nc: nc, r: wire.NewReader(nc, wire.Options{}), w: wire.NewWriter(nc, wire.Options{})}
	c.send(&wire.Hello{Version: wire.Version, ClientName: t.Name()})
	if _, ok := c.read().(*wire.HelloOK); !ok {
		t.Fatal("no HelloOK")
	}
	return c
}

// publishInOrder publishes n bodies of size bytes (each starting with its
// index) on its own connection, one at a time, and reports the first
// failure or nil.
func publishInOrder(addr, queue string, n, size int) error {
	nc, err := net.DialTimeout("tcp", addr, waitLimit)
	if err != nil {
		return err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(2 * waitLimit))
	r, w := wire.NewReader(nc, wire.Options{}), wire.NewWriter(nc, wire.Options{})
	send := func(f wire.Frame) error {
		if err := w.WriteFrame(f); err != nil {
			return err
		}
		return w.Flush()
	}
	if err := send(&wire.Hello{Version: wire.Version, ClientName: "publisher"}); err != nil {
		return err
	}
	if _, err := r.ReadFrame(); err != nil {
		return err
	}
	for i := range n {
		body := append([]byte(fmt.Sprintf("%08d", i)), bytes.Repeat([]byte("x"), size-8)...)
		if err := send(&wire.Publish{Corr: uint64(i + 1), Queue: queue, Body: body}); err != nil {
			return err
		}
		f, err := r.ReadFrame()
		if err != nil {
			return err
		}
		if c, ok := f.(*wire.Confirm); !ok || c.Corr != uint64(i+1) {
			return fmt.Errorf("publish %d: got %#v", i, f)
		}
	}
	return nil
}

// The delivery budget, end to end: a consumer that never reads its socket
// (nor acks) and one that keeps up share a queue. Once the deliveries
// queued to the first pass the budget it is paused, so the messages go to
// the fast one instead of filling the slow one's window; after the grace
// period the slow one is sent Goodbye with the reason and closed, and
// what it held comes back to the fast one. Every message reaches the fast
// consumer.
func TestDeliveryBudgetPausesThenClosesSlowConsumer(t *testing.T) {
	const (
		budget   = 1 << 20
		n        = 1500
		size     = 32 << 10
		prefetch = 500 // the slow consumer's window: 16 MB if it were filled
	)
	s := startBudgetServer(t, Options{DeliveryBudget: budget, SlowConsumerGrace: time.Second,
		WriteTimeout: time.Minute, Heartbeat: -1, MaxFrame: 1 << 20})
	admin := connect(t, s.addr, "")
	admin.declare(&wire.Declare{Queue: "q", Durability: wire.DurabilityBuffered})

	slow := dialSmallWindow(t, s.addr)
	slow.send(&wire.Subscribe{Corr: 1, SubID: 1, Queue: "q", Prefetch: prefetch})
	published := make(chan error, 1)
	go func() { published <- publishInOrder(s.addr, "q", n, size) }()

	// The fast consumer comes once the slow one is paused: alone, the slow
	// one holds the whole budget when it is paused, more than twice what
	// its small kernel buffers take, so it cannot look caught up and be
	// resumed (with a fast consumer from the start it could be paused
	// holding little, resume once the kernel took half of that, and never
	// be paused again once the queue was drained).
	waitFor(t, "the slow consumer to be paused", func() bool {
		_, _, now := s.SlowConsumers()
		return now == 1
	})
	fast := connect(t, s.addr, "")
	fast.subscribe(1, "q", 20) // its window fits in the budget

	type progress struct {
		distinct int
		err      error
	}
	fastDone := make(chan progress, 1)
	go func() { // the fast consumer acks everything it gets, on its own goroutine
		seen := make(map[int]bool)
		for len(seen) < n {
			fast.nc.SetReadDeadline(time.Now().Add(2 * waitLimit))
			f, err := fast.r.ReadFrame()
			if err != nil {
				fastDone <- progress{len(seen), err}
				return
			}
			d, ok := f.(*wire.Deliver)
			if !ok {
				continue
			}
			i, err := strconv.Atoi(string(d.Body[:8]))
			if err != nil {
				fastDone <- progress{len(seen), err}
				return
			}
			seen[i] = true
			if err := fast.w.WriteFrame(&wire.Ack{SubID: 1, Tags: []uint64{d.Tag}}); err == nil {
				err = fast.w.Flush()
			}
			if err != nil {
				fastDone <- progress{len(seen), err}
				return
			}
		}
		fastDone <- progress{len(seen), nil}
	}()

	if err := <-published; err != nil {
		t.Fatalf("publisher: %v", err)
	}
	waitFor(t, "the slow consumer to be closed after its grace period", func() bool {
		_, closed, _ := s.SlowConsumers()
		return closed == 1
	})
	// Now read what the slow consumer was sent: what its kernel buffers
	// took before it was paused, then the Goodbye with the reason.
	frames := slow.closeGracefully()
	var delivered int
	var bye *wire.Goodbye
	for _, f := range frames {
		switch f := f.(type) {
		case *wire.Deliver:
			delivered++
		case *wire.Goodbye:
			bye = f
		}
	}
	if bye == nil || !strings.Contains(bye.Reason, "consumer too slow") || !strings.Contains(bye.Reason, "server.delivery_budget") {
		t.Fatalf("slow consumer's last frames %v: want a Goodbye naming the delivery budget", frames[max(len(frames)-3, 0):])
	}
	if delivered >= prefetch {
		t.Fatalf("the slow consumer was sent %d deliveries, its whole window: it was never paused", delivered)
	}
	p := <-fastDone
	if p.err != nil || p.distinct != n {
		t.Fatalf("fast consumer got %d of %d messages: %v", p.distinct, n, p.err)
	}
	// The fast consumer may have been paused too, for a moment: its window
	// is more than half the budget, and the slow one held the total over
	// it. It resumes once the slow one is closed; it is never closed.
	pauses, closed, now := s.SlowConsumers()
	if pauses < 1 || closed != 1 || now != 0 {
		t.Fatalf("slow consumers: %d paused, %d closed, %d paused now; want 1 or more, 1, 0", pauses, closed, now)
	}
	waitFor(t, "the budget to count nothing queued", func() bool { return s.QueuedDeliveryBytes() == 0 })
	t.Logf("the slow consumer was sent %d deliveries before it was paused (window %d)", delivered, prefetch)
}

// A paused connection that catches up resumes instead of being closed.
func TestDeliveryBudgetResumesConsumerThatCatchesUp(t *testing.T) {
	s := startBudgetServer(t, Options{DeliveryBudget: MinDeliveryBudget, SlowConsumerGrace: time.Hour,
		WriteTimeout: time.Minute, Heartbeat: -1})
	admin := connect(t, s.addr, "")
	admin.declare(&wire.Declare{Queue: "q", Durability: wire.DurabilityBuffered})
	slow := dialSmallWindow(t, s.addr)
	slow.subscribe(1, "q", 2000)
	const n, size = 400, 8 << 10 // far more than the small buffers take
	published := make(chan error, 1)
	go func() { published <- publishInOrder(s.addr, "q", n, size) }()
	waitFor(t, "the consumer to be paused", func() bool {
		_, _, now := s.SlowConsumers()
		return now == 1
	})
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	// It reads (and acks) at last: it resumes and gets every message.
	seen := map[string]bool{}
	for len(seen) < n {
		d := slow.deliver()
		seen[string(d.Body[:8])] = true
		slow.send(&wire.Ack{SubID: 1, Tags: []uint64{d.Tag}})
	}
	waitFor(t, "the consumer to be resumed", func() bool {
		_, _, now := s.SlowConsumers()
		return now == 0
	})
	if pauses, closed, _ := s.SlowConsumers(); pauses < 1 || closed != 0 {
		t.Fatalf("slow consumers: %d paused, %d closed; want at least 1 and 0", pauses, closed)
	}
}
