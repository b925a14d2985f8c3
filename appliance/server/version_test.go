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
	// Written after the crash, in the log's incarnation 1.
	before := time.Now()
	if _, err := b.Publish(ctx, "q", appliance.Message{ID: "m-1", Key: "device-9", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	ts := serveBroker(t, b, Options{}, nil)

	for _, tc := range []struct {
		version uint16
		want    wire.Deliver // SubID, MessageID, Key, Incarnation
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
