package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/admin"
	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/internal/fibrildproc"
	"github.com/fibril-edge/fibril/internal/loopback"
)

// freePorts reserves n loopback ports for cluster listeners that must be
// known before any node starts (each node's peers name the others).
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	addrs, err := loopback.Ports(n)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

// Issue test 5 of federation part 1: three fibrild processes on loopback
// form a cluster from their configuration; a client declares and
// publishes through a node that does not own the queue (the publish is
// forwarded to the owner), consumes through the third node (which
// proxies the owner's deliveries and the settles), and every message
// arrives once; a nacked one comes back; the acks empty the owner's queue.
func TestClusterOfThreeProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three fibrild processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp := startClusterProcs(t, ctx)
	ids, procs := cp.ids, cp.procs
	clients := map[string]*client.Client{}
	for id := range procs {
		clients[id] = cp.dial(t, ctx, id)
	}
	res, err := clients["n1"].DeclareQueue(ctx, client.Queue("orders").Durable().Partitions(2))
	if err != nil {
		t.Fatalf("declare through n1: %v\n%s", err, procs["n1"].Log())
	}
	if res.Durability != client.Durable {
		t.Fatalf("declared %+v", res)
	}
	// Every node's admin API shows the same placement, as it reads.
	var owner string
	for _, id := range ids {
		var v admin.ClusterView
		waitView(t, ctx, procs[id].Admin, &v, func() bool {
			return len(v.Members) == 3 && v.Leader != "" && len(v.Queues) == 1 && len(v.Queues[0].Partitions) == 2
		})
		if owner == "" {
			owner = v.Queues[0].Partitions[0].Owner
		}
		for _, p := range v.Queues[0].Partitions {
			if p.Owner != owner || p.Reads != "durable on 2 of 3" || len(p.Followers) != 2 {
				t.Fatalf("%s shows partition %+v; the owner is %s", id, p, owner)
			}
		}
	}
	// Publish through one node that does not own the queue and consume
	// through the other: the first forwards publishes to the owner, the
	// second proxies the owner's deliveries and the settles.
	var others []string
	for _, id := range ids {
		if id != owner {
			others = append(others, id)
		}
	}
	via, through := others[0], others[1]
	consumer, err := clients[through].Consume(ctx, "orders", 200)
	if err != nil {
		t.Fatalf("consume through %s (owner %s): %v\n%s", through, owner, err, procs[owner].Log())
	}
	defer consumer.Close()
	const n = 2000
	futures := make([]*client.Future, n)
	for i := range n {
		futures[i] = clients[via].PublishAsync("orders", client.Message{Key: fmt.Sprint(i % 8), Body: []byte(fmt.Sprint(i))})
	}
	for i, f := range futures {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatalf("publish %d through %s (owner %s): %v", i, via, owner, err)
		}
	}
	// Nack the first delivery with requeue: it must come back through the
	// proxy, counted as a second delivery. Ack everything else.
	seen := map[string]int{}
	nacked := ""
	for len(seen) < n || nacked != "" {
		select {
		case d, ok := <-consumer.Messages():
			if !ok {
				t.Fatalf("consumer ended after %d messages: %v", len(seen), consumer.Err())
			}
			body := string(d.Body)
			if nacked == "" && len(seen) == 0 {
				nacked = body
				seen[body]++
				if err := d.Nack(true); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if body == nacked {
				if d.Deliveries != 2 {
					t.Fatalf("the nacked message came back as delivery %d, want 2", d.Deliveries)
				}
				nacked = ""
			} else {
				seen[body]++
				if seen[body] > 1 {
					t.Fatalf("message %s delivered twice through %s", body, through)
				}
			}
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d messages consumed through %s (owner %s)", len(seen), n, through, owner)
		}
	}
	// The proxy's acks reached the owner: its queue empties.
	waitQueueEmpty(t, ctx, procs[owner].Admin, "orders")
	// The admin API declares through the control plane, with a policy.
	resp, err := http.Post(procs[via].Admin+"/api/queues", "application/json",
		strings.NewReader(`{"name":"events","policy":"replica_buffered:3"}`))
	if err != nil {
		t.Fatal(err)
	}
	var reply struct {
		Created bool           `json:"created"`
		Queue   map[string]any `json:"queue"`
	}
	json.NewDecoder(resp.Body).Decode(&reply)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || reply.Queue["durability"] != "buffered" {
		t.Fatalf("POST /api/queues with a policy: %d %+v", resp.StatusCode, reply)
	}
	resp, err = http.Post(procs[via].Admin+"/api/cluster/join", "application/json", strings.NewReader(`{"peer":"nowhere"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("join via a bad peer address: %d, want 400", resp.StatusCode)
	}
}

// clusterProcs is a cluster of three fibrild processes on loopback, each
// restartable on its own data directory.
type clusterProcs struct {
	// leader is the raft leader when the cluster had formed.
	leader string
	ids    []string
	opts   map[string]fibrildproc.Options
	procs  map[string]*fibrildproc.Process
}

// startClusterProcs starts n1, n2 and n3, each bootstrapping with the
// other two as peers, and returns once n1 lists all three and a leader (the
// cluster places copies on the members it has).
func startClusterProcs(t *testing.T, ctx context.Context) *clusterProcs {
	t.Helper()
	return startClusterProcsWith(t, ctx, nil)
}

// startClusterProcsWith is startClusterProcs with extra(id)'s flags added
// to node id's (nil: none).
func startClusterProcsWith(t *testing.T, ctx context.Context, extra func(id string) []string) *clusterProcs {
	t.Helper()
	bin := buildDaemon(t)
	// Cluster ports, then client ports: fixed, as on a site, so a node
	// that restarts keeps its addresses.
	ports := freePorts(t, 6)
	cp := &clusterProcs{ids: []string{"n1", "n2", "n3"}, opts: map[string]fibrildproc.Options{},
		procs: map[string]*fibrildproc.Process{}}
	for i, id := range cp.ids {
		var peers []string
		for j, other := range cp.ids {
			if j != i {
				peers = append(peers, other+"@"+ports[j])
			}
		}
		cp.opts[id] = fibrildproc.Options{Bin: bin, DataDir: filepath.Join(t.TempDir(), id), Listen: ports[3+i],
			Args: []string{"--storage.min_free", "0", "--storage.segment_size", "1MiB",
				"--cluster.node_id", id, "--cluster.listen", ports[i], "--cluster.peers", strings.Join(peers, ","),
				"--cluster.bootstrap", "true"}}
		if extra != nil {
			o := cp.opts[id]
			o.Args = append(o.Args, extra(id)...)
			cp.opts[id] = o
		}
		cp.start(t, ctx, id)
	}
	var v admin.ClusterView
	waitView(t, ctx, cp.procs["n1"].Admin, &v, func() bool { return len(v.Members) == 3 && v.Leader != "" })
	cp.leader = v.Leader
	return cp
}

// start starts (or restarts) node id on its data directory.
func (cp *clusterProcs) start(t *testing.T, ctx context.Context, id string) *fibrildproc.Process {
	t.Helper()
	p, err := fibrildproc.Start(ctx, cp.opts[id])
	if err != nil {
		t.Fatalf("start %s: %v", id, err)
	}
	cp.procs[id] = p
	t.Cleanup(p.Kill)
	return p
}

// dial connects a client to node id as it runs now, closed at the end of
// the test.
func (cp *clusterProcs) dial(t *testing.T, ctx context.Context, id string) *client.Client {
	t.Helper()
	c, err := client.Dial(ctx, cp.procs[id].Addr, client.Options{})
	if err != nil {
		t.Fatalf("dial %s: %v", id, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitView polls GET /api/cluster at admin into v until ready holds.
func waitView(t *testing.T, ctx context.Context, adminURL string, v *admin.ClusterView, ready func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := http.Get(adminURL + "/api/cluster")
		if err == nil {
			*v = admin.ClusterView{}
			err = json.NewDecoder(resp.Body).Decode(v)
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK && ready() {
				return
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("GET %s/api/cluster never showed the expected view; last %+v (%v)", adminURL, *v, err)
		}
	}
}

// waitQueueEmpty polls GET /api/queues/{queue} at admin until the queue
// holds no message, ready or in flight.
func waitQueueEmpty(t *testing.T, ctx context.Context, admin, queue string) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var q struct {
		Messages int64 `json:"messages"`
	}
	for {
		q.Messages = -1
		resp, err := http.Get(admin + "/api/queues/" + queue)
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&q)
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK && q.Messages == 0 {
				return
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("queue %s at %s never emptied: %d messages (%v)", queue, admin, q.Messages, err)
		}
	}
}
