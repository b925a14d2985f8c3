package uplink_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/federation/uplink"
	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/internal/brokertest"
	"github.com/fibril-edge/fibril/internal/tcpproxy"
)

// testTimeout bounds every wait; generous for -race on a loaded machine.
const testTimeout = 60 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// site is an edge broker, an upstream broker, and a link between them the
// test can cut.
type site struct {
	edge, hq         *appliance.Broker
	edgeAddr, hqAddr string
	link             *tcpproxy.Proxy
}

func newSite(t *testing.T) *site {
	t.Helper()
	s := &site{}
	s.edge, s.edgeAddr = brokertest.Start(t)
	s.hq, s.hqAddr = brokertest.Start(t)
	p, err := tcpproxy.Start(s.hqAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	s.link = p
	return s
}

// options are an uplink's options from the edge to hq through the link.
func (s *site) options(queues ...string) uplink.Options {
	return uplink.Options{
		Name: "to-hq", Queues: queues, To: []string{s.link.Addr()}, Source: "edge1",
		Window: 64, MinBackoff: 5 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Rescan: 20 * time.Millisecond,
		Local: func(ctx context.Context) (*client.Client, error) {
			return client.Dial(ctx, s.edgeAddr, client.Options{Logger: brokertest.Quiet()})
		},
		ListQueues: s.edge.QueueNames,
		Info: func(q string) (uplink.LocalQueue, bool) {
			in, err := s.edge.QueueInfo(q)
			if err != nil {
				return uplink.LocalQueue{}, false
			}
			return uplink.LocalQueue{Durability: in.Config.Durability, Messages: in.Messages, Bytes: in.Bytes,
				AckDeadline: in.Config.AckDeadline}, true
		},
		Logger: brokertest.Quiet(),
	}
}

// run starts an uplink; stop ends it and waits for it.
func run(t *testing.T, o uplink.Options) (u *uplink.Uplink, stop func()) {
	t.Helper()
	u, err := uplink.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- u.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("uplink run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return u, stop
}

func messages(t *testing.T, b *appliance.Broker, q string) int64 {
	t.Helper()
	in, err := b.QueueInfo(q)
	if errors.Is(err, appliance.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return in.Messages
}

func declare(t *testing.T, b *appliance.Broker, c appliance.QueueConfig) {
	t.Helper()
	if _, err := b.Declare(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

// publishN publishes bodies "0" .. "n-1" to the edge's queue, pipelined,
// and waits for every confirm.
func publishN(t *testing.T, ctx context.Context, addr, q string, from, n int) {
	t.Helper()
	c, err := client.Dial(ctx, addr, client.Options{Logger: brokertest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fs := make([]*client.Future, 0, n)
	for i := from; i < from+n; i++ {
		fs = append(fs, c.PublishAsyncContext(ctx, q, client.Message{Body: []byte(strconv.Itoa(i))}))
	}
	for i, f := range fs {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatalf("publish %d: %v", from+i, err)
		}
	}
}

// upstream is what a consumer of the remote queue receives: every body,
// checked for repeats and for each local partition's order.
func upstream(t *testing.T, ctx context.Context, addr, q string, n int) map[string]bool {
	t.Helper()
	c, err := client.Dial(ctx, addr, client.Options{Logger: brokertest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cons, err := c.Consume(ctx, q, 256)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	bodies := make(map[string]bool, n)
	last := map[string]uint64{} // local partition (the id's prefix) -> last local offset
	for len(bodies) < n {
		select {
		case d := <-cons.Messages():
			if bodies[string(d.Body)] {
				t.Fatalf("body %q delivered upstream twice (id %s)", d.Body, d.ID)
			}
			bodies[string(d.Body)] = true
			cut := strings.LastIndexByte(d.ID, '/')
			off, err := strconv.ParseUint(d.ID[cut+1:], 10, 64)
			if err != nil {
				t.Fatalf("forwarded id %q: %v", d.ID, err)
			}
			part := d.ID[:cut]
			if prev, ok := last[part]; ok && off <= prev {
				t.Fatalf("local partition %s out of order upstream: offset %d after %d", part, off, prev)
			}
			last[part] = off
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatalf("upstream received %d of %d", len(bodies), n)
		}
	}
	return bodies
}

// TestForwardsThroughCutsExactlyOnceInOrder cuts the link three times
// while messages are forwarded: the remote queue ends up with every
// message once, each local partition in order, and the local queue empty.
func TestForwardsThroughCutsExactlyOnceInOrder(t *testing.T) {
	ctx := testCtx(t)
	s := newSite(t)
	declare(t, s.edge, appliance.QueueConfig{Name: "sensors", Durability: appliance.Buffered, Partitions: 2})
	u, _ := run(t, s.options("sensors"))
	const n = 3000
	published := make(chan struct{})
	go func() {
		defer close(published)
		publishN(t, ctx, s.edgeAddr, "sensors", 0, n)
	}()
	for _, at := range []int64{300, 1200, 2100} {
		// Cut with publishes in flight, so that the cut is one the
		// uplink must resend through (one that found it idle between
		// windows would test nothing).
		await.Until(t, ctx, fmt.Sprintf("%d messages upstream, and more in flight", at), func() bool {
			st := u.Stats()
			return messages(t, s.hq, "sensors") >= at && len(st.Queues) > 0 && st.Queues[0].InFlight > 0
		})
		s.link.Cut()
		await.Until(t, ctx, "the uplink to notice the cut", func() bool {
			st := u.Stats()
			return st.Remote == "" || (len(st.Queues) > 0 && st.Queues[0].State == uplink.StateBackingOff)
		})
		s.link.Restore()
	}
	<-published
	await.Until(t, ctx, "every message upstream and acked locally", func() bool {
		return messages(t, s.hq, "sensors") >= n && messages(t, s.edge, "sensors") == 0
	})
	if got := messages(t, s.hq, "sensors"); got != n {
		t.Fatalf("upstream holds %d messages, want exactly %d", got, n)
	}
	bodies := upstream(t, ctx, s.hqAddr, "sensors", n)
	for i := range n {
		if !bodies[strconv.Itoa(i)] {
			t.Fatalf("message %d never arrived upstream", i)
		}
	}
	st := u.Stats().Queues[0]
	if st.Forwarded < n || st.Resent == 0 {
		t.Fatalf("stats after three cuts: forwarded %d (want at least %d), resent %d (want some)", st.Forwarded, n, st.Resent)
	}
}

// TestNothingLeavesTheEdgeBeforeTheRemoteConfirm: with the link down the
// uplink holds its window of messages, and the local queue keeps every
// one of them until the link is back and the remote confirmed them.
func TestNothingLeavesTheEdgeBeforeTheRemoteConfirm(t *testing.T) {
	ctx := testCtx(t)
	s := newSite(t)
	declare(t, s.edge, appliance.QueueConfig{Name: "alarms", Durability: appliance.Durable})
	u, _ := run(t, s.options("alarms"))
	await.Until(t, ctx, "the uplink to connect", func() bool {
		st := u.Stats()
		return len(st.Queues) == 1 && st.Queues[0].State == uplink.StateConnected
	})
	s.link.Cut()
	const n = 200
	publishN(t, ctx, s.edgeAddr, "alarms", 0, n)
	await.Until(t, ctx, "the uplink to take its window", func() bool {
		in, err := s.edge.QueueInfo("alarms")
		return err == nil && in.InFlight == 64
	})
	if got := messages(t, s.edge, "alarms"); got != n {
		t.Fatalf("with the link down the edge holds %d of %d messages", got, n)
	}
	if got := messages(t, s.hq, "alarms"); got != 0 {
		t.Fatalf("upstream holds %d messages through a cut link", got)
	}
	st := u.Stats().Queues[0]
	if st.BacklogMessages != n || st.LocalDurability != "durable" {
		t.Fatalf("queue stats while the link is down: %+v", st)
	}
	s.link.Restore()
	await.Until(t, ctx, "everything forwarded", func() bool {
		return messages(t, s.hq, "alarms") == n && messages(t, s.edge, "alarms") == 0
	})
}

// TestRestartedUplinkResendsWithTheSameIDs: an uplink stopped mid-forward
// and started again resends what it had not acked, and the remote queue's
// dedupe window drops every repeat.
func TestRestartedUplinkResendsWithTheSameIDs(t *testing.T) {
	ctx := testCtx(t)
	s := newSite(t)
	declare(t, s.edge, appliance.QueueConfig{Name: "q", Durability: appliance.Buffered})
	const n = 2000
	publishN(t, ctx, s.edgeAddr, "q", 0, n)
	_, stop := run(t, s.options("q"))
	await.Until(t, ctx, "forwarding under way", func() bool { return messages(t, s.hq, "q") >= n/4 })
	s.link.Cut() // confirms in flight are lost: their messages stay unacked at the edge
	stop()
	held := messages(t, s.edge, "q")
	if held == 0 || held == n {
		t.Fatalf("the edge holds %d of %d after the stop; want some forwarded and some not", held, n)
	}
	s.link.Restore()
	u2, _ := run(t, s.options("q"))
	await.Until(t, ctx, "the rest forwarded", func() bool { return messages(t, s.edge, "q") == 0 })
	if got := messages(t, s.hq, "q"); got != n {
		t.Fatalf("upstream holds %d, want exactly %d", got, n)
	}
	upstream(t, ctx, s.hqAddr, "q", n)
	if st := u2.Stats().Queues[0]; st.Forwarded != uint64(held) {
		t.Fatalf("the second uplink forwarded %d, want the %d the edge still held", st.Forwarded, held)
	}
}

// TestPatternsTemplateAndWeakening: a pattern picks up a queue declared
// later, the template names its remote queue, and a durable local queue
// forwarded into a buffered remote one is reported as weakened.
func TestPatternsTemplateAndWeakening(t *testing.T) {
	ctx := testCtx(t)
	s := newSite(t)
	declare(t, s.hq, appliance.QueueConfig{Name: "site7-alarms-b", Durability: appliance.Buffered})
	o := s.options("alarms-*")
	o.RemoteQueue = "site7-{queue}"
	u, _ := run(t, o)
	declare(t, s.edge, appliance.QueueConfig{Name: "alarms-a", Durability: appliance.Durable})
	declare(t, s.edge, appliance.QueueConfig{Name: "alarms-b", Durability: appliance.Durable})
	declare(t, s.edge, appliance.QueueConfig{Name: "other", Durability: appliance.Durable})
	publishN(t, ctx, s.edgeAddr, "alarms-a", 0, 10)
	publishN(t, ctx, s.edgeAddr, "alarms-b", 0, 10)
	publishN(t, ctx, s.edgeAddr, "other", 0, 10)
	await.Until(t, ctx, "both alarm queues forwarded", func() bool {
		return messages(t, s.hq, "site7-alarms-a") == 10 && messages(t, s.hq, "site7-alarms-b") == 10
	})
	if messages(t, s.edge, "other") != 10 {
		t.Fatal("a queue no pattern names was consumed")
	}
	in, err := s.hq.QueueInfo("site7-alarms-a")
	if err != nil || in.Config.DedupeWindow != uplink.DefaultDedupeWindow {
		t.Fatalf("remote queue declared with dedupe window %v (%v), want %v", in.Config.DedupeWindow, err, uplink.DefaultDedupeWindow)
	}
	weak := map[string]bool{}
	for _, q := range u.Stats().Queues {
		weak[q.Local] = q.Weakened
	}
	if weak["alarms-a"] || !weak["alarms-b"] || len(weak) != 2 {
		t.Fatalf("weakened per queue: %v, want only alarms-b (buffered upstream)", weak)
	}
}

func TestOptionsRefused(t *testing.T) {
	local := func(context.Context) (*client.Client, error) { return nil, errors.New("unused") }
	good := uplink.Options{Name: "u", Queues: []string{"a-*"}, To: []string{"h:7420"}, RemoteQueue: "x-{queue}", Source: "e", Local: local}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*uplink.Options){
		"no name":               func(o *uplink.Options) { o.Name = "" },
		"bad pattern":           func(o *uplink.Options) { o.Queues = []string{"a-["} },
		"no address":            func(o *uplink.Options) { o.To = nil },
		"one remote, pattern":   func(o *uplink.Options) { o.RemoteQueue = "x" },
		"negative rate":         func(o *uplink.Options) { o.Rate = -1 },
		"dedupe window too big": func(o *uplink.Options) { o.DedupeWindow = 8 * 24 * time.Hour },
		"no source":             func(o *uplink.Options) { o.Source = "" },
	} {
		o := good
		mutate(&o)
		if err := o.Validate(); !errors.Is(err, uplink.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// The uplink keeps the leases of what it holds through an outage: a lapsed
// lease counts as a delivery, and past MaxDeliveries the edge would
// discard the message. A clock queue with the same lease and a consumer
// that never acks shows when three leases have lapsed; by then nothing
// the uplink holds may have been discarded, and once the link is back
// everything reaches upstream.
func TestUplinkKeepsItsLeasesThroughAnOutage(t *testing.T) {
	ctx := testCtx(t)
	s := newSite(t)
	lease := appliance.QueueConfig{Durability: appliance.Durable, MaxDeliveries: 3, AckDeadline: 500 * time.Millisecond}
	q, clock := lease, lease
	q.Name, clock.Name = "q", "clock"
	declare(t, s.edge, q)
	declare(t, s.edge, clock)
	u, _ := run(t, s.options("q")) // Info gives the lease: extended every third of it
	await.Until(t, ctx, "connected", func() bool {
		st := u.Stats()
		return len(st.Queues) == 1 && st.Queues[0].State == "connected"
	})
	s.link.Cut()
	const n = 50
	publishN(t, ctx, s.edgeAddr, "q", 0, n)
	await.Until(t, ctx, "the uplink to hold every message", func() bool {
		in, err := s.edge.QueueInfo("q")
		return err == nil && in.InFlight == n
	})
	c, err := client.Dial(ctx, s.edgeAddr, client.Options{Logger: brokertest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub, err := c.Subscribe(ctx, "clock", client.SubscribeOptions{Prefetch: 1, ManualAck: true,
		Handler: func(context.Context, *client.Delivery) error { return nil }}) // never settles
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	publishN(t, ctx, s.edgeAddr, "clock", 0, 1)
	await.Until(t, ctx, "three leases to lapse on the clock queue", func() bool {
		in, err := s.edge.QueueInfo("clock")
		return err == nil && in.Counters.Discarded >= 1
	})
	if in, err := s.edge.QueueInfo("q"); err != nil || in.Counters.Discarded != 0 || in.Counters.DeadLettered != 0 || in.Messages != n {
		t.Fatalf("after three lapsed leases the edge holds %d of %d (discarded %d, dead-lettered %d; err %v)",
			in.Messages, n, in.Counters.Discarded, in.Counters.DeadLettered, err)
	}
	s.link.Restore()
	await.Until(t, ctx, "everything upstream", func() bool { return messages(t, s.edge, "q") == 0 && messages(t, s.hq, "q") == n })
}

// A local queue deleted and declared again starts a log of its own: its
// messages' stable ids are not the old queue's, so upstream, which still
// remembers those within its dedupe window, takes them as new.
func TestRecreatedQueueForwardsUnderIDsOfItsOwn(t *testing.T) {
	ctx := testCtx(t)
	s := newSite(t)
	declare(t, s.edge, appliance.QueueConfig{Name: "q", Durability: appliance.Durable})
	u, _ := run(t, s.options("q"))
	publishN(t, ctx, s.edgeAddr, "q", 0, 10)
	await.Until(t, ctx, "the first queue's messages forwarded", func() bool {
		return messages(t, s.hq, "q") == 10 && messages(t, s.edge, "q") == 0
	})
	if err := s.edge.DeleteQueue(context.Background(), "q"); err != nil {
		t.Fatal(err)
	}
	declare(t, s.edge, appliance.QueueConfig{Name: "q", Durability: appliance.Durable})
	publishN(t, ctx, s.edgeAddr, "q", 10, 10)
	await.Until(t, ctx, "the second queue's messages forwarded as new", func() bool {
		return messages(t, s.hq, "q") == 20 && messages(t, s.edge, "q") == 0
	})
	if st := u.Stats().Queues[0]; st.Duplicates != 0 {
		t.Fatalf("upstream took %d of the second queue's messages for duplicates", st.Duplicates)
	}
}

// An uplink that has never reached its remote (a site booted during an
// outage) still shows the queues it will forward and their backlog.
func TestUplinkShowsItsQueuesBeforeTheRemoteAnswers(t *testing.T) {
	ctx := testCtx(t)
	s := newSite(t)
	declare(t, s.edge, appliance.QueueConfig{Name: "q", Durability: appliance.Durable})
	publishN(t, ctx, s.edgeAddr, "q", 0, 7)
	s.link.Cut()
	u, _ := run(t, s.options("q"))
	await.Until(t, ctx, "the uplink to try the remote", func() bool { return u.Stats().LastError != "" })
	st := u.Stats()
	if len(st.Queues) != 1 || st.Queues[0].Local != "q" || st.Queues[0].BacklogMessages != 7 || st.Queues[0].State == uplink.StateConnected {
		t.Fatalf("before the remote answered: %+v", st.Queues)
	}
}
