package server

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// TestPrefetchAndCredit checks the window from the client's side: at every
// Deliver, deliveries received minus settles sent is at most Prefetch plus
// the Credit sent. (The server counts settles it has applied, which are
// never more than those sent, so a server that keeps its window passes.)
func TestPrefetchAndCredit(t *testing.T) {
	ts := startServer(t, Options{})
	c := connect(t, ts.addr, "")
	c.declare(&wire.Declare{Queue: "q", Partitions: 2})
	for i := range 40 {
		c.publish("q", []byte(fmt.Sprint(i)))
	}

	const prefetch = 4
	window, received, settled := prefetch, 0, 0
	var held []uint64
	take := func(n int) {
		t.Helper()
		for range n {
			d := c.deliver()
			received++
			held = append(held, d.Tag)
			if out := received - settled; out > window {
				t.Fatalf("%d unsettled deliveries out, window %d", out, window)
			}
		}
	}
	c.subscribe(1, "q", prefetch)
	take(prefetch)

	c.send(&wire.Credit{SubID: 1, Credit: 3})
	window += 3
	take(3)

	c.send(&wire.Ack{SubID: 1, Tags: held[:5]})
	settled += 5
	held = held[5:]
	take(5)

	// Unsubscribed comes after every Deliver of the subscription; count
	// those still on their way.
	c.send(&wire.Unsubscribe{Corr: 99, SubID: 1})
	for {
		f := c.read()
		if u, ok := f.(*wire.Unsubscribed); ok {
			if u.Corr != 99 || u.SubID != 1 {
				t.Fatalf("unsubscribed %+v", u)
			}
			break
		}
		if _, ok := f.(*wire.Deliver); !ok {
			t.Fatalf("got %#v before Unsubscribed", f)
		}
		received++
		if out := received - settled; out > window {
			t.Fatalf("%d unsettled deliveries out, window %d", out, window)
		}
	}

	// The subscription's deliveries were released when it ended. Prefetch
	// 0 means the server default (100), so all 35 unsettled messages come
	// to a new subscription.
	window, received, settled = 100, 0, 0
	c.subscribe(2, "q", 0)
	take(35)
}

func TestSettle(t *testing.T) {
	ts := startServer(t, Options{})
	c := connect(t, ts.addr, "")
	c.declare(&wire.Declare{Queue: "q"})
	for i := range 6 {
		c.publish("q", []byte(fmt.Sprint(i)))
	}
	c.subscribe(7, "q", 6)
	var tags []uint64
	for range 6 {
		d := c.deliver()
		if d.SubID != 7 || d.Deliveries != 1 {
			t.Fatalf("deliver %+v", d)
		}
		tags = append(tags, d.Tag)
	}

	// One batch: two good tags, a tag that was never issued, and a
	// repeat. Only the bad ones get a SettleError.
	const bogus = 1 << 60
	c.send(&wire.Ack{SubID: 7, Tags: []uint64{tags[0], bogus, tags[1], tags[0]}})
	// Nack with requeue: redelivered with Deliveries 2.
	c.send(&wire.Nack{SubID: 7, Tags: []uint64{tags[2]}, Requeue: true})
	// Nack without requeue: dropped (no dead-letter queue).
	c.send(&wire.Nack{SubID: 7, Tags: []uint64{tags[3]}})
	// Settles for an unknown subscription: every tag is stale.
	c.send(&wire.Ack{SubID: 8, Tags: []uint64{tags[4]}})

	var staleTags []uint64
	var redelivered *wire.Deliver
	for len(staleTags) < 3 || redelivered == nil {
		switch f := c.read().(type) {
		case *wire.SettleError:
			if f.Code != wire.CodeStaleTag || f.Message == "" {
				t.Fatalf("settle error %+v", f)
			}
			staleTags = append(staleTags, f.Tag)
		case *wire.Deliver:
			if redelivered != nil {
				t.Fatalf("a second delivery %+v", f)
			}
			redelivered = f
		default:
			t.Fatalf("unexpected %#v", f)
		}
	}
	slices.Sort(staleTags)
	if want := []uint64{tags[0], tags[4], bogus}; !slices.Equal(staleTags, want) {
		t.Fatalf("stale tags %v, want %v", staleTags, want)
	}
	if redelivered.Deliveries != 2 || redelivered.Offset != 2 || redelivered.Tag == tags[2] {
		t.Fatalf("redelivery %+v", redelivered)
	}

	// Ack everything still held; afterwards only the acks and discards
	// are gone: 6 - 2 acked - 1 discarded - 3 acked now = 0.
	c.send(&wire.Ack{SubID: 7, Tags: []uint64{tags[4], tags[5], redelivered.Tag}})
	c.send(&wire.Unsubscribe{Corr: 50, SubID: 7})
	if u, ok := c.read().(*wire.Unsubscribed); !ok || u.Corr != 50 {
		t.Fatalf("want Unsubscribed")
	}
	waitFor(t, "settles to apply", func() bool {
		info, _ := ts.b.QueueInfo("q")
		return info.Messages == 0
	})

	// Unsubscribing twice: the second is NotFound, the connection stays.
	c.send(&wire.Unsubscribe{Corr: 51, SubID: 7})
	c.expectError(51, wire.CodeNotFound)
	// Subscribing to a missing queue or with a SubID in use fails alone.
	c.send(&wire.Subscribe{Corr: 52, SubID: 1, Queue: "missing"})
	c.expectError(52, wire.CodeNotFound)
	c.subscribe(3, "q", 1)
	c.send(&wire.Subscribe{Corr: 53, SubID: 3, Queue: "q"})
	c.expectError(53, wire.CodeBadRequest)
}

// A connection that ends releases what its subscriptions held.
func TestCloseReleasesDeliveries(t *testing.T) {
	ts := startServer(t, Options{})
	pub := connect(t, ts.addr, "")
	pub.declare(&wire.Declare{Queue: "q"})
	for i := range 3 {
		pub.publish("q", []byte(fmt.Sprint(i)))
	}
	a := connect(t, ts.addr, "")
	a.subscribe(1, "q", 10)
	for range 3 {
		a.deliver()
	}
	b := connect(t, ts.addr, "")
	b.subscribe(1, "q", 10)
	a.nc.Close()
	for range 3 {
		if d := b.deliver(); d.Deliveries != 1 {
			// Released by a closing subscription, not expired: not counted.
			t.Fatalf("redelivery %+v", d)
		}
	}
}

// TestExtendAndDelayedNack: an Extend of held tags is answered by nothing,
// of stale ones by a SettleError per tag; a Nack with a delay gives the
// credit back at once (the next message comes meanwhile) and redelivers
// the message only after the delay.
func TestExtendAndDelayedNack(t *testing.T) {
	const delay = 500 * time.Millisecond
	ts := startServer(t, Options{})
	c := connect(t, ts.addr, "")
	c.declare(&wire.Declare{Queue: "q", AckDeadlineMillis: 300})
	for i := range 2 {
		c.publish("q", []byte(fmt.Sprint(i)))
	}
	c.subscribe(1, "q", 1)
	first := c.deliver()
	const bogus = 1 << 60
	c.send(&wire.Extend{SubID: 1, Tags: []uint64{first.Tag, bogus}})
	if f, ok := c.read().(*wire.SettleError); !ok || f.Tag != bogus || f.Code != wire.CodeStaleTag {
		t.Fatalf("extend of a held and an unknown tag: %#v", f)
	}
	c.send(&wire.Extend{SubID: 2, Tags: []uint64{first.Tag}})
	if f, ok := c.read().(*wire.SettleError); !ok || f.Tag != first.Tag || f.Code != wire.CodeStaleTag {
		t.Fatalf("extend on an unknown subscription: %#v", f)
	}
	nackedAt := time.Now()
	c.send(&wire.Nack{SubID: 1, Tags: []uint64{first.Tag}, Requeue: true, DelayMillis: uint32(delay / time.Millisecond)})
	second := c.deliver()
	if second.Offset == first.Offset || second.Deliveries != 1 {
		t.Fatalf("meanwhile %+v, want the other message", second)
	}
	c.send(&wire.Ack{SubID: 1, Tags: []uint64{second.Tag}})
	again := c.deliver()
	if waited := time.Since(nackedAt); waited < delay {
		t.Fatalf("redelivered after %v, before the delay of %v", waited, delay)
	}
	if again.Offset != first.Offset || again.Deliveries != 2 {
		t.Fatalf("redelivery %+v of %+v", again, first)
	}
	c.send(&wire.Extend{SubID: 1, Tags: []uint64{first.Tag}}) // delayed, then requeued: stale
	if f, ok := c.read().(*wire.SettleError); !ok || f.Tag != first.Tag || f.Code != wire.CodeStaleTag {
		t.Fatalf("extend of a requeued tag: %#v", f)
	}
	waitFor(t, "the session's counts", func() bool {
		for _, s := range ts.Sessions() {
			for _, sub := range s.Subscriptions {
				return sub.Acked == 1 && sub.Nacked == 1
			}
		}
		return false
	})
}

// TestExtendNeedsVersion5: on a version 4 connection an Extend is an
// unknown frame, a protocol violation, and a Nack keeps its version 4
// layout (no delay) and requeues at once.
func TestExtendNeedsVersion5(t *testing.T) {
	ts := startServer(t, Options{})
	c := dial(t, ts.addr)
	c.send(&wire.Hello{Version: 4, ClientName: t.Name()})
	if ok, isOK := c.read().(*wire.HelloOK); !isOK || ok.Version != 4 {
		t.Fatalf("hello at version 4: %+v", ok)
	}
	c.declare(&wire.Declare{Queue: "q"})
	c.publish("q", []byte("m"))
	c.subscribe(1, "q", 1)
	d := c.deliver()
	c.send(&wire.Nack{SubID: 1, Tags: []uint64{d.Tag}, Requeue: true})
	if again := c.deliver(); again.Deliveries != 2 {
		t.Fatalf("redelivery %+v", again)
	}
	b, err := wire.AppendFrame(nil, &wire.Extend{SubID: 1, Tags: []uint64{d.Tag}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.nc.Write(b); err != nil {
		t.Fatal(err)
	}
	c.expectFatal(wire.CodeBadRequest)
}
