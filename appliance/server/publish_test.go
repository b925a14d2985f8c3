package server

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/fibril-edge/fibril/appliance/wire"
)

func TestPipelinedPublishes(t *testing.T) {
	for _, mode := range []wire.Durability{wire.DurabilityBuffered, wire.DurabilityDurable} {
		t.Run(mode.String(), func(t *testing.T) {
			ts := startServer(t, Options{})
			c := connect(t, ts.addr, "")
			c.declare(&wire.Declare{Queue: "q", Durability: mode, Partitions: 2})

			// Send every publish before reading a single confirm.
			const n = 500
			want := make(map[uint64]bool, n)
			for i := range n {
				corr := c.nextCorr()
				want[corr] = true
				if err := c.w.WriteFrame(&wire.Publish{Corr: corr, Queue: "q", Key: fmt.Sprint(i % 7),
					Body: []byte(fmt.Sprintf("m%d", i))}); err != nil {
					t.Fatal(err)
				}
			}
			c.send()
			seen := make(map[[2]uint64]bool)
			last := map[uint16]uint64{}
			for range n {
				f := c.read()
				cf, ok := f.(*wire.Confirm)
				if !ok {
					t.Fatalf("want Confirm, got %#v", f)
				}
				if !want[cf.Corr] {
					t.Fatalf("confirm for unknown or repeated Corr %d", cf.Corr)
				}
				delete(want, cf.Corr)
				pos := [2]uint64{uint64(cf.Partition), cf.Offset}
				if seen[pos] || cf.Partition > 1 {
					t.Fatalf("confirm %+v: position repeated or out of range", cf)
				}
				seen[pos] = true
				if prev, ok := last[cf.Partition]; ok && cf.Offset <= prev {
					t.Fatalf("partition %d confirmed offset %d after %d", cf.Partition, cf.Offset, prev)
				}
				last[cf.Partition] = cf.Offset
			}
			if info, _ := ts.b.QueueInfo("q"); info.Messages != n {
				t.Fatalf("queue holds %d messages, want %d", info.Messages, n)
			}
		})
	}
}

func TestPublishErrors(t *testing.T) {
	ts := startServer(t, Options{MaxFrame: 4096})
	c := connect(t, ts.addr, "")
	c.declare(&wire.Declare{Queue: "q", MaxMessages: 1})
	c.declare(&wire.Declare{Queue: "dd", DedupeWindowMillis: 60_000})

	// The largest message whose Deliver fits, and one byte more.
	p := &wire.Publish{Queue: "q", MessageID: "id", Headers: []wire.Header{{Key: "k", Value: "v"}}}
	p.Body = bytes.Repeat([]byte("x"), 4096-wire.DeliverLen(p)+1)
	p.Corr = c.nextCorr()
	c.send(p)
	c.expectError(p.Corr, wire.CodeTooLarge)
	p.Body = p.Body[1:]
	p.Corr = c.nextCorr()
	c.send(p)
	if _, ok := c.read().(*wire.Confirm); !ok {
		t.Fatal("a message that fits a Deliver frame was refused")
	}

	corr := c.nextCorr()
	c.send(&wire.Publish{Corr: corr, Queue: "q", Body: []byte("over the limit")})
	c.expectError(corr, wire.CodeQueueFull)

	corr = c.nextCorr()
	c.send(&wire.Publish{Corr: corr, Queue: "missing", Body: []byte("x")})
	c.expectError(corr, wire.CodeNotFound)

	// A repeated message id inside the dedupe window is confirmed as a
	// duplicate at the original's position.
	c.send(&wire.Publish{Corr: c.nextCorr(), Queue: "dd", MessageID: "m-1", Body: []byte("a")})
	first := c.read().(*wire.Confirm)
	c.send(&wire.Publish{Corr: c.nextCorr(), Queue: "dd", MessageID: "m-1", Body: []byte("a")})
	dup := c.read().(*wire.Confirm)
	if first.Duplicate || !dup.Duplicate || dup.Offset != first.Offset || dup.Partition != first.Partition {
		t.Fatalf("first %+v, repeat %+v", first, dup)
	}

	// A request with Corr 0 is a protocol violation.
	c.send(&wire.Publish{Queue: "q", Body: []byte("x")})
	c.expectFatal(wire.CodeBadRequest)
}

// The publishes a connection reads back to back share one append, which
// starts once no whole frame is left in its buffer, before any other
// request, and when the connection ends: publishes ahead of a frame that
// breaks the protocol are kept, as they were before the connection read
// it.
func TestPublishesReadTogetherAreKept(t *testing.T) {
	ts := startServer(t, Options{})
	c := connect(t, ts.addr, "")
	c.declare(&wire.Declare{Queue: "q", Durability: wire.DurabilityBuffered})
	var buf bytes.Buffer
	w := wire.NewWriter(&buf, wire.Options{})
	w.SetVersion(wire.Version)
	const n = 10
	for i := range n {
		if err := w.WriteFrame(&wire.Publish{Corr: c.nextCorr(), Queue: "q", Body: []byte(fmt.Sprintf("m%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	buf.Write([]byte{0, 0, 0, 1, 0xee}) // a frame of a type no one knows
	if _, err := c.nc.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	// Buffered publishes are confirmed when written: each confirm goes
	// out before the Error that ends the connection.
	closing := c.expectClosed()
	if len(closing) != n+1 {
		t.Fatalf("before the close: %v, want %d confirms and the Error", closing, n)
	}
	for i, f := range closing[:n] {
		if _, ok := f.(*wire.Confirm); !ok {
			t.Fatalf("frame %d before the close is %#v, want a Confirm", i, f)
		}
	}
	waitFor(t, "the publishes read before the bad frame", func() bool {
		info, err := ts.b.QueueInfo("q")
		return err == nil && info.Messages == n
	})

	// Publishes and a request in one write: the request is answered
	// after the publishes ahead of it are confirmed.
	c = connect(t, ts.addr, "")
	var frames []wire.Frame
	for i := range n {
		frames = append(frames, &wire.Publish{Corr: c.nextCorr(), Queue: "q", Body: []byte(fmt.Sprintf("m%d", i))})
	}
	c.send(append(frames, &wire.Goodbye{Reason: "done"})...)
	got := c.expectClosed()
	confirmed := 0
	for _, f := range got {
		switch f.(type) {
		case *wire.Confirm:
			confirmed++
		case *wire.Goodbye:
			if confirmed != n {
				t.Fatalf("Goodbye after %d of %d confirms", confirmed, n)
			}
		}
	}
	if confirmed != n {
		t.Fatalf("%d confirms, want %d (frames %v)", confirmed, n, got)
	}
}

// A publish's body is read in place from the connection's buffer, which
// the next frames overwrite: every message must be stored as it was sent,
// with publishes pipelined across many refills of the buffer.
func TestPipelinedBodiesAreStoredAsSent(t *testing.T) {
	ts := startServer(t, Options{})
	c := connect(t, ts.addr, "")
	c.declare(&wire.Declare{Queue: "q", Durability: wire.DurabilityBuffered})
	const n = 2000
	bodyOf := func(i int) []byte { // 700 to 2,699 bytes, each of its own
		return bytes.Repeat([]byte(fmt.Sprintf("<%05d>", i)), 100+i%286)
	}
	sent := make(chan struct{})
	go func() { // the confirms are read below, while the publishes go out
		defer close(sent)
		for i := range n {
			if err := c.w.WriteFrame(&wire.Publish{Corr: uint64(i + 100), Queue: "q", Body: bodyOf(i)}); err != nil {
				t.Error(err)
				return
			}
		}
		if err := c.w.Flush(); err != nil {
			t.Error(err)
		}
	}()
	for range n {
		if _, ok := c.read().(*wire.Confirm); !ok {
			t.Fatal("want a Confirm")
		}
	}
	<-sent
	c.subscribe(1, "q", 100)
	for i := range n {
		d := c.deliver()
		if !bytes.Equal(d.Body, bodyOf(i)) {
			t.Fatalf("message %d stored as %.40q..., sent as %.40q...", i, d.Body, bodyOf(i))
		}
		c.send(&wire.Ack{SubID: 1, Tags: []uint64{d.Tag}})
	}
}
