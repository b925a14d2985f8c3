package server

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/wire"
)

// TestDeliverByVersion: a client of version 2 gets each Deliver with the
// incarnation of the partition log it was written in and the message's
// key; a client of version 1 gets the version 1 layout, without them. The
// message is published after a crash, so that its incarnation is not a
// new log's 0. A client of version 6 also gets when the broker took the
// publish; one of version 5 does not.
func TestDeliverByVersion(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	open := func(fs vfs.FS) *appliance.Broker {
		t.Helper()
		b, err := appliance.Open(appliance.Options{FS: fs, DataDir: "data", MinFreeBytes: -1, Logger: testLogger()})
		if err != nil {
			t.Fatalf("open broker: %v", err)
		}
		return b
	}
	b := open(mem)
	if _, err := b.Declare(ctx, appliance.QueueConfig{Name: "q", Durability: appliance.Durable}); err != nil {
		t.Fatal(err)
	}
	// A crash: the page cache kept it all.
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 1))})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = open(crashed)
	// Written after the crash, in the log's second incarnation (the first
	// is its own, at random, at least 2).
	before := time.Now()
	if _, err := b.Publish(ctx, "q", appliance.Message{ID: "m-1", Key: "device-9", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	ts := serveBroker(t, b, Options{}, nil)

	var inc uint64 // the incarnation the newest version carries; the others agree
	for _, tc := range []struct {
		version uint16
		want    wire.Deliver // SubID, MessageID, Key, Incarnation (1: the log's, 0: none)
	}{
		{6, wire.Deliver{SubID: 6, MessageID: "m-1", Key: "device-9", Incarnation: 1, PublishedAt: 1}},
		{5, wire.Deliver{SubID: 5, MessageID: "m-1", Key: "device-9", Incarnation: 1}},
		{2, wire.Deliver{SubID: 2, MessageID: "m-1", Key: "device-9", Incarnation: 1}},
		{1, wire.Deliver{SubID: 1, MessageID: "m-1"}},
	} {
		c := dial(t, ts.addr)
		c.send(&wire.Hello{Version: tc.version, ClientName: t.Name()})
		ok, isOK := c.read().(*wire.HelloOK)
		if !isOK || ok.Version != tc.version {
			t.Fatalf("hello at version %d: %+v", tc.version, ok)
		}
		c.r.SetVersion(ok.Version)
		c.w.SetVersion(ok.Version)
		c.subscribe(tc.want.SubID, "q", 1)
		d, isDeliver := c.read().(*wire.Deliver)
		if isDeliver && inc == 0 {
			inc = d.Incarnation
			if inc < 3 {
				t.Fatalf("version %d: incarnation %d after a crash, want at least 3", tc.version, inc)
			}
		}
		if tc.want.Incarnation != 0 {
			tc.want.Incarnation = inc
		}
		if !isDeliver || d.SubID != tc.want.SubID || d.MessageID != tc.want.MessageID ||
			d.Key != tc.want.Key || d.Incarnation != tc.want.Incarnation {
			t.Fatalf("version %d: got %+v, want %+v", tc.version, d, tc.want)
		}
		if at := time.Unix(0, d.PublishedAt); (tc.want.PublishedAt != 0) != (d.PublishedAt != 0) ||
			d.PublishedAt != 0 && (at.Before(before) || at.After(after)) {
			t.Fatalf("version %d: published at %v, want %v within %v to %v", tc.version, d.PublishedAt, tc.want.PublishedAt != 0, before, after)
		}
		c.nc.Close()
	}
}

// A message whose Deliver is exactly the frame limit in version 5's layout
// (stored before version 6 added PublishedAt's 8 bytes) still goes to a
// client of version 5, whose Deliver fits; a publish is admitted only if
// its Deliver fits in the newest layout.
func TestDeliverAtTheLimitByVersion(t *testing.T) {
	ctx := context.Background()
	b, err := appliance.Open(appliance.Options{FS: vfs.NewMem(), DataDir: "data", MinFreeBytes: -1, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Declare(ctx, appliance.QueueConfig{Name: "q"}); err != nil {
		t.Fatal(err)
	}
	const limit = 4096
	f := &wire.Deliver{MessageID: "m"}
	f.Body = make([]byte, limit-f.FrameLenIn(5))
	if f.FrameLenIn(5) != limit || f.FrameLen() <= limit {
		t.Fatalf("frame of %d bytes in version 5, %d in version 6", f.FrameLenIn(5), f.FrameLen())
	}
	if _, err := b.Publish(ctx, "q", appliance.Message{ID: "m", Body: f.Body}); err != nil { // the broker itself: no frame limit
		t.Fatal(err)
	}
	ts := serveBroker(t, b, Options{MaxFrame: limit}, nil)
	c := dial(t, ts.addr)
	c.send(&wire.Hello{Version: 5, ClientName: t.Name()})
	ok, isOK := c.read().(*wire.HelloOK)
	if !isOK || ok.Version != 5 {
		t.Fatalf("hello at version 5: %+v", ok)
	}
	c.r.SetVersion(5)
	c.w.SetVersion(5)
	c.subscribe(1, "q", 1)
	if d, isDeliver := c.read().(*wire.Deliver); !isDeliver || len(d.Body) != len(f.Body) {
		t.Fatalf("version 5 at the limit: got %+v", d)
	}
	// The same publish through the server is refused: its Deliver does
	// not fit in version 6.
	c.send(&wire.Publish{Corr: 9, Queue: "q", MessageID: "m2", Body: f.Body})
	if e, isErr := c.read().(*wire.Error); !isErr || e.Code != wire.CodeTooLarge {
		t.Fatalf("publish whose version 6 Deliver is over the limit: %+v", e)
	}
	c.nc.Close()
}
