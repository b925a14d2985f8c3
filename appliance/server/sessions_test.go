package server

import (
	"context"
	"testing"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/wire"
)

// Sessions lists each connection that completed its Hello with the
// client's name and its publishes, and each subscription with its queue,
// prefetch, deliveries, settles and what it holds unsettled.
func TestSessions(t *testing.T) {
	ts := startServer(t, Options{})
	if _, err := ts.b.Declare(context.Background(), appliance.QueueConfig{Name: "q"}); err != nil {
		t.Fatal(err)
	}
	dial(t, ts.addr) // no Hello yet: not listed
	pub := connect(t, ts.addr, "")
	for range 4 {
		pub.publish("q", []byte("m"))
	}
	cons := connect(t, ts.addr, "")
	cons.subscribe(7, "q", 5)
	var tags []uint64
	for range 4 {
		tags = append(tags, cons.deliver().Tag)
	}
	cons.send(&wire.Ack{SubID: 7, Tags: tags[:2]}, &wire.Nack{SubID: 7, Requeue: false, Tags: tags[2:3]},
		&wire.Ack{SubID: 7, Tags: []uint64{999}}) // unknown: not counted
	var got []SessionInfo
	waitFor(t, "the settles counted", func() bool {
		got = ts.Sessions()
		return len(got) == 2 && len(got[1].Subscriptions) == 1 && got[1].Subscriptions[0].Acked == 2 && got[1].Subscriptions[0].Nacked == 1
	})
	p, c := got[0], got[1]
	if p.Client != t.Name() || p.Published != 4 || p.Confirmed != 4 || p.Version != wire.Version || p.Since.IsZero() || p.Remote == "" {
		t.Errorf("publisher: %+v", p)
	}
	s := c.Subscriptions[0]
	if s.ID != 7 || s.Queue != "q" || s.Prefetch != 5 || s.Delivered != 4 || s.Unsettled != 1 {
		t.Errorf("subscription: %+v, want 4 delivered, 2 acked, 1 nacked, 1 unsettled", s)
	}
}
