package server

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/wire"
)

// request sends f with a fresh Corr (through set) and returns the next
// frame that is not an unasked Unsubscribed.
func (c *client) request(f wire.Frame, set func(corr uint64)) wire.Frame {
	c.t.Helper()
	corr := c.nextCorr()
	set(corr)
	c.send(f)
	for {
		switch r := c.read().(type) {
		case *wire.Unsubscribed:
			if r.Corr == 0 {
				continue
			}
			return r
		default:
			return r
		}
	}
}

// TestQueueManagement: against a real broker, QueueInfo reports what was
// published and delivered, with each partition's written and durable
// frontiers; PurgeQueue discards the ready messages and says how many;
// DeleteQueue with IfEmpty refuses a queue holding messages, without it
// deletes the queue, and a publish then fails with not_found.
func TestQueueManagement(t *testing.T) {
	ts := startServer(t, Options{})
	c := connect(t, ts.addr, "")
	c.declare(&wire.Declare{Queue: "q", Partitions: 2})
	for range 5 {
		c.publish("q", []byte("12345"))
	}
	c.subscribe(1, "q", 2)
	c.deliver()
	c.deliver()

	info := &wire.QueueInfo{Queue: "q"}
	r, ok := c.request(info, func(n uint64) { info.Corr = n }).(*wire.QueueInfoReply)
	if !ok || r.Corr != info.Corr || r.Queue != "q" || r.Durability != wire.DurabilityDurable ||
		r.Ready != 3 || r.InFlight != 2 || r.Consumers != 1 || r.Bytes < 5*5 || len(r.Partitions) != 2 {
		t.Fatalf("QueueInfo: %+v", r)
	}
	var written uint64
	for i, p := range r.Partitions {
		// Durable: every confirmed publish is synced, so nothing written
		// is beyond the durable frontier once the confirms are in.
		if p.DurableNext > p.WrittenNext {
			t.Errorf("partition %d: durable %d above written %d", i, p.DurableNext, p.WrittenNext)
		}
		written += p.WrittenNext
	}
	if written < 5 {
		t.Errorf("frontiers %+v: %d records written, want at least the 5 publishes", r.Partitions, written)
	}

	purge := &wire.PurgeQueue{Queue: "q"}
	if p, ok := c.request(purge, func(n uint64) { purge.Corr = n }).(*wire.Purged); !ok || p.Purged != 3 || p.Queue != "q" {
		t.Fatalf("PurgeQueue: %+v", p)
	}
	if in, _ := ts.b.QueueInfo("q"); in.Ready != 0 || in.InFlight != 2 {
		t.Fatalf("after the purge: %d ready, %d in flight; want 0 and 2", in.Ready, in.InFlight)
	}

	del := &wire.DeleteQueue{Queue: "q", IfEmpty: true}
	e, ok := c.request(del, func(n uint64) { del.Corr = n }).(*wire.Error)
	if !ok || e.Corr != del.Corr || e.Code != wire.CodeConflict || !strings.Contains(e.Message, "2 in flight") {
		t.Fatalf("DeleteQueue if empty of a queue holding 2: %+v", e)
	}
	del = &wire.DeleteQueue{Queue: "q"}
	if d, ok := c.request(del, func(n uint64) { del.Corr = n }).(*wire.Deleted); !ok || d.Queue != "q" {
		t.Fatalf("DeleteQueue: %+v", d)
	}
	pub := &wire.Publish{Queue: "q", Body: []byte("x")}
	if e, ok := c.request(pub, func(n uint64) { pub.Corr = n }).(*wire.Error); !ok || e.Code != wire.CodeNotFound {
		t.Fatalf("publish after the delete: %+v", e)
	}
	for _, f := range []struct {
		f   wire.Frame
		set func(uint64)
	}{
		{info, func(n uint64) { info.Corr = n }},
		{purge, func(n uint64) { purge.Corr = n }},
		{del, func(n uint64) { del.Corr = n }},
	} {
		if e, ok := c.request(f.f, f.set).(*wire.Error); !ok || e.Code != wire.CodeNotFound {
			t.Errorf("%s of a deleted queue: %+v", f.f.Type(), e)
		}
	}

	// An empty queue goes with IfEmpty.
	c.declare(&wire.Declare{Queue: "empty"})
	del = &wire.DeleteQueue{Queue: "empty", IfEmpty: true}
	if d, ok := c.request(del, func(n uint64) { del.Corr = n }).(*wire.Deleted); !ok {
		t.Fatalf("DeleteQueue if empty of an empty queue: %+v", d)
	}
}

// TestQueueManagementNeedsVersion5: a client that settled on version 4
// cannot send the version 5 requests: the server reads one as an unknown
// frame, a protocol violation that closes the connection.
func TestQueueManagementNeedsVersion5(t *testing.T) {
	ts := startServer(t, Options{})
	for _, f := range []wire.Frame{
		&wire.QueueInfo{Corr: 1, Queue: "q"},
		&wire.PurgeQueue{Corr: 1, Queue: "q"},
		&wire.DeleteQueue{Corr: 1, Queue: "q"},
	} {
		c := dial(t, ts.addr)
		c.send(&wire.Hello{Version: 4, ClientName: t.Name()})
		if ok, isOK := c.read().(*wire.HelloOK); !isOK || ok.Version != 4 {
			t.Fatalf("hello at version 4: %+v", ok)
		}
		// The Writer, set to version 4, refuses the frame; send its
		// version 5 bytes by hand, as a broken client would.
		b, err := wire.AppendFrame(nil, f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.nc.Write(b); err != nil {
			t.Fatal(err)
		}
		c.expectFatal(wire.CodeBadRequest)
	}
}

// fakeCluster is a Cluster for a node that serves only what its broker
// has; Owner names "n2" for the queues in elsewhere.
type fakeCluster struct {
	b         *appliance.Broker
	elsewhere map[string]bool

	mu      sync.Mutex
	deleted []string
}

func (f *fakeCluster) Declare(ctx context.Context, c appliance.QueueConfig) (appliance.DeclareResult, error) {
	return f.b.Declare(ctx, c)
}

func (*fakeCluster) ForwardFrom(any, string, appliance.Message, func(appliance.Confirm, error)) bool {
	return false
}

func (*fakeCluster) Local(string) bool { return false }

func (*fakeCluster) Consume(context.Context, string, appliance.SubscribeOptions) (Consumer, int, bool, error) {
	return nil, 0, false, nil
}

// managedCluster adds ClusterQueues to fakeCluster.
type managedCluster struct{ *fakeCluster }

func (f managedCluster) DeleteQueue(ctx context.Context, name string) error {
	f.mu.Lock()
	f.deleted = append(f.deleted, name)
	f.mu.Unlock()
	return f.b.DeleteQueue(ctx, name)
}

func (f managedCluster) Owner(queue string) (string, string, bool) {
	if f.elsewhere[queue] {
		return "n2", "10.0.0.2:7420", true
	}
	return "", "", false
}

// TestQueueManagementOnClusterNode: a cluster node answers QueueInfo and
// PurgeQueue of a queue another node serves with served_elsewhere naming
// that node, deletes through the cluster, and, when its Cluster offers no
// ClusterQueues, refuses DeleteQueue rather than delete its own copy only.
func TestQueueManagementOnClusterNode(t *testing.T) {
	b, err := appliance.Open(appliance.Options{DataDir: t.TempDir(), MinFreeBytes: -1, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	fc := &fakeCluster{b: b, elsewhere: map[string]bool{"remote": true}}
	ts := serveBroker(t, b, Options{Cluster: managedCluster{fc}}, nil)
	c := connect(t, ts.addr, "")

	info := &wire.QueueInfo{Queue: "remote"}
	purge := &wire.PurgeQueue{Queue: "remote"}
	ifEmpty := &wire.DeleteQueue{Queue: "remote", IfEmpty: true}
	for _, f := range []struct {
		f   wire.Frame
		set func(uint64)
	}{
		{info, func(n uint64) { info.Corr = n }},
		{purge, func(n uint64) { purge.Corr = n }},
		{ifEmpty, func(n uint64) { ifEmpty.Corr = n }},
	} {
		e, ok := c.request(f.f, f.set).(*wire.Error)
		if !ok || e.Code != wire.CodeServedElsewhere || !strings.Contains(e.Message, "node n2") ||
			!strings.Contains(e.Message, "10.0.0.2:7420") {
			t.Errorf("%s of a queue node n2 serves: %+v", f.f.Type(), e)
		}
	}
	// A queue no node serves is not found, as on a solo node.
	info = &wire.QueueInfo{Queue: "nowhere"}
	if e, ok := c.request(info, func(n uint64) { info.Corr = n }).(*wire.Error); !ok || e.Code != wire.CodeNotFound {
		t.Errorf("QueueInfo of an unknown queue: %+v", e)
	}
	// This node's own queue: answered here, deleted through the cluster.
	c.declare(&wire.Declare{Queue: "local"})
	info = &wire.QueueInfo{Queue: "local"}
	if r, ok := c.request(info, func(n uint64) { info.Corr = n }).(*wire.QueueInfoReply); !ok || len(r.Partitions) != 1 {
		t.Errorf("QueueInfo of this node's queue: %+v", r)
	}
	del := &wire.DeleteQueue{Queue: "local"}
	if d, ok := c.request(del, func(n uint64) { del.Corr = n }).(*wire.Deleted); !ok {
		t.Fatalf("DeleteQueue through the cluster: %+v", d)
	}
	fc.mu.Lock()
	deleted := fc.deleted
	fc.mu.Unlock()
	if len(deleted) != 1 || deleted[0] != "local" {
		t.Fatalf("the cluster deleted %v, want [local]", deleted)
	}

	// A Cluster without ClusterQueues: no deletion of this node's copy
	// alone.
	b2, err := appliance.Open(appliance.Options{DataDir: t.TempDir(), MinFreeBytes: -1, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ts2 := serveBroker(t, b2, Options{Cluster: &fakeCluster{b: b2}}, nil)
	c2 := connect(t, ts2.addr, "")
	c2.declare(&wire.Declare{Queue: "kept"})
	del = &wire.DeleteQueue{Queue: "kept"}
	if e, ok := c2.request(del, func(n uint64) { del.Corr = n }).(*wire.Error); !ok || e.Code != wire.CodeBadRequest {
		t.Fatalf("DeleteQueue without ClusterQueues: %+v", e)
	}
	if _, err := b2.QueueInfo("kept"); err != nil {
		t.Fatalf("the queue is gone: %v", err)
	}
}
