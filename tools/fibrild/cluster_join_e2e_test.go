package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/admin"
	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/internal/fibrildproc"
)

// A solo node with messages in two queues is given a [cluster] section
// without peers and restarted: it serves both while it is no member, and
// "fibril cluster join" at run time (POST /api/cluster/join) makes it
// one. The cluster already has a queue of the same name as one of its
// own, declared in the other mode. Nothing is merged: the node brings its
// other queue along, live, and keeps the clashing one local and
// unreplicated, with every message, served to its own clients and listed
// in its cluster view, while clients of the other nodes reach the
// cluster's queue. Once the operator deleted the local queue through this
// node, the name is the cluster's here too.
func TestClusterJoinAtRunTimeKeepsAClashingQueueLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three fibrild processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := buildDaemon(t)
	ports := freePorts(t, 6)
	ids := []string{"n1", "n2", "n3"}
	clusterArgs := func(i int) []string {
		var peers []string
		for j, other := range ids {
			if j != i {
				peers = append(peers, other+"@"+ports[j])
			}
		}
		return []string{"--cluster.node_id", ids[i], "--cluster.listen", ports[i],
			"--cluster.peers", strings.Join(peers, ","), "--cluster.bootstrap", "true"}
	}
	base := []string{"--storage.min_free", "0", "--storage.segment_size", "1MiB"}
	opts := func(i int, clustered bool) fibrildproc.Options {
		o := fibrildproc.Options{Bin: bin, DataDir: filepath.Join(t.TempDir(), ids[i]), Listen: ports[3+i], Args: base}
		if clustered {
			o.Args = append(append([]string(nil), base...), clusterArgs(i)...)
		}
		return o
	}
	start := func(o fibrildproc.Options) *fibrildproc.Process {
		t.Helper()
		p, err := fibrildproc.Start(ctx, o)
		if err != nil {
			t.Fatalf("start fibrild on %s: %v", o.DataDir, err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("the log of fibrild on %s:\n%s", o.DataDir, p.Log())
			}
		})
		t.Cleanup(p.Kill)
		return p
	}
	dial := func(p *fibrildproc.Process) *client.Client {
		t.Helper()
		c, err := client.Dial(ctx, p.Addr, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	publish := func(c *client.Client, queue, prefix string, n int) {
		t.Helper()
		for i := range n {
			if _, err := c.Publish(ctx, queue, client.Message{Body: fmt.Appendf(nil, "%s-%d", prefix, i)}); err != nil {
				t.Fatalf("publish %s to %s: %v", prefix, queue, err)
			}
		}
	}

	// n1 serves two durable queues solo, with messages in both.
	n1opts := opts(0, false)
	solo := start(n1opts)
	sc := dial(solo)
	for _, q := range []string{"orders", "events"} {
		if _, err := sc.DeclareQueue(ctx, client.Queue(q).Durable()); err != nil {
			t.Fatal(err)
		}
	}
	publish(sc, "orders", "solo", 40)
	publish(sc, "events", "solo", 30)
	sc.Close()
	if err := solo.Stop(30 * time.Second); err != nil {
		t.Fatalf("stop the solo node: %v", err)
	}

	// n2 and n3 form the cluster (two of three voters) and declare
	// "orders" buffered, before n1 is there.
	n2 := start(opts(1, true))
	n3 := start(opts(2, true))
	var v admin.ClusterView
	waitView(t, ctx, n2.Admin, &v, func() bool { return v.Leader != "" })
	c2 := dial(n2)
	if _, err := c2.DeclareQueue(ctx, client.Queue("orders").Buffered()); err != nil {
		t.Fatalf("declare orders in the cluster: %v\n%s", err, n2.Log())
	}
	publish(c2, "orders", "cluster", 5)

	// n1 restarts as a cluster node with no peers: it is no member, and
	// serves its queues meanwhile.
	n1opts.Args = append(append([]string(nil), base...), "--cluster.node_id", "n1", "--cluster.listen", ports[0])
	n1 := start(n1opts)
	waitView(t, ctx, n1.Admin, &v, func() bool { return len(v.LocalQueues) == 2 })
	for _, q := range v.LocalQueues {
		if !q.Joining {
			t.Fatalf("before it is a member n1 lists %+v, want both queues waiting to join", v.LocalQueues)
		}
	}
	c1 := dial(n1)
	publish(c1, "events", "waiting", 2)
	wantCount(t, ctx, n1.Admin, "events", 32)

	// fibril cluster join, at run time, while a client publishes to
	// events through n1: every publish confirmed across the hand-over
	// must be there afterwards.
	stopPub := make(chan struct{})
	pubDone := make(chan struct{})
	var during, refused int
	go func() {
		defer close(pubDone)
		for {
			select {
			case <-stopPub:
				return
			default:
			}
			body := fmt.Appendf(nil, "during-%d", during)
			if _, err := c1.Publish(ctx, "events", client.Message{Body: body}); err != nil {
				refused++
				continue
			}
			during++
		}
	}()
	body := strings.NewReader(fmt.Sprintf(`{"peer": %q}`, ports[1]))
	resp, err := http.Post(n1.Admin+"/api/cluster/join", "application/json", body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /api/cluster/join: %s\n%s", resp.Status, n1.Log())
	}
	waitView(t, ctx, n1.Admin, &v, func() bool {
		joining := false
		for _, q := range v.LocalQueues {
			joining = joining || q.Joining
		}
		return len(v.Members) == 3 && v.Leader != "" && ownerOf(v, "events") == "n1" && !joining
	})
	close(stopPub)
	<-pubDone
	t.Logf("%d publishes confirmed through n1 during the join, %d refused", during, refused)
	if len(v.LocalQueues) != 1 || v.LocalQueues[0].Name != "orders" || !strings.Contains(v.LocalQueues[0].Reason, "already has") {
		t.Fatalf("n1's cluster view lists local queues %+v, want orders with the clash named", v.LocalQueues)
	}
	if !strings.Contains(n1.Log(), "queue stays local and unreplicated") {
		t.Fatalf("n1 did not report the clash:\n%s", n1.Log())
	}
	var v2 admin.ClusterView
	waitView(t, ctx, n2.Admin, &v2, func() bool { return ownerOf(v2, "orders") != "" })
	clusterOrders := map[string]string{"n2": n2.Admin, "n3": n3.Admin}[ownerOf(v2, "orders")]
	if clusterOrders == "" {
		t.Fatalf("the cluster's orders is owned by %q, want n2 or n3", ownerOf(v2, "orders"))
	}
	publish(c1, "orders", "local", 3)
	publish(dial(n3), "orders", "cluster-more", 2)
	wantCount(t, ctx, n1.Admin, "orders", 43)     // the local queue: 40 solo + 3
	wantCount(t, ctx, clusterOrders, "orders", 7) // the cluster's: 5 + 2
	// The joined queue is the cluster's: every message, through a node
	// that does not own it.
	drainBodies(t, ctx, dial(n3), "events", 32+during, "solo-", "waiting-", "during-")
	// The local one is served here, whole, and nowhere else.
	drainBodies(t, ctx, c1, "orders", 43, "solo-", "local-")

	// The operator deletes the local queue through n1: the name is the
	// cluster's there from then on, and the solo logs are gone.
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, n1.Admin+"/api/queues/orders", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("DELETE the local queue: %s", resp.Status)
	}
	waitView(t, ctx, n1.Admin, &v, func() bool { return len(v.LocalQueues) == 0 && ownerOf(v, "orders") != "" })
	if _, err := os.Stat(filepath.Join(n1opts.DataDir, "queues", "orders")); !os.IsNotExist(err) {
		t.Fatalf("the deleted local queue's logs are still there: %v", err)
	}
	publish(c1, "orders", "after", 1)
	wantCount(t, ctx, clusterOrders, "orders", 8)
}

// wantCount waits until queue holds n messages as the node at adminURL
// reports it.
func wantCount(t *testing.T, ctx context.Context, adminURL, queue string, n int64) {
	t.Helper()
	await.Until(t, ctx, fmt.Sprintf("%s at %s to hold %d messages", queue, adminURL, n), func() bool {
		m, _ := queueHolds(t, adminURL, queue)
		return m == n
	})
}

// drainBodies consumes n messages of queue through c, acking each, and
// checks each body starts with one of prefixes and none comes twice.
func drainBodies(t *testing.T, ctx context.Context, c *client.Client, queue string, n int, prefixes ...string) {
	t.Helper()
	cons, err := c.Consume(ctx, queue, 100)
	if err != nil {
		t.Fatalf("consume %s: %v", queue, err)
	}
	defer cons.Close()
	seen := map[string]bool{}
	for len(seen) < n {
		select {
		case d, ok := <-cons.Messages():
			if !ok {
				t.Fatalf("consumer of %s ended after %d messages: %v", queue, len(seen), cons.Err())
			}
			body := string(d.Body)
			known := false
			for _, p := range prefixes {
				known = known || strings.HasPrefix(body, p)
			}
			if !known || seen[body] {
				t.Fatalf("%s delivered %q (seen before: %v), want one of %v each once", queue, body, seen[body], prefixes)
			}
			seen[body] = true
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatalf("%s delivered %d of %d messages", queue, len(seen), n)
		}
	}
}
