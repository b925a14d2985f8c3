package federation

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/server"
	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/internal/waltest"
)

// syncGate blocks every file sync of a node's copies while held.
type syncGate struct {
	mu   sync.Mutex
	held chan struct{} // nil: syncs pass
}

func (g *syncGate) hold() {
	g.mu.Lock()
	g.held = make(chan struct{})
	g.mu.Unlock()
}

func (g *syncGate) release() {
	g.mu.Lock()
	if g.held != nil {
		close(g.held)
		g.held = nil
	}
	g.mu.Unlock()
}

func (g *syncGate) MaybeError(op errorfs.Op) error {
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		g.mu.Lock()
		ch := g.held
		g.mu.Unlock()
		if ch != nil {
			<-ch
		}
	}
	return nil
}

func (g *syncGate) String() string { return "syncGate" }

type clusterNode struct {
	id      string
	cluster *Cluster
	broker  *appliance.Broker
	syncs   *syncGate
	// addr is the node's client listener, served with the cluster as the
	// server's Cluster.
	addr string
	srv  *server.Server
}

// startNodes runs three cluster nodes in one process: each its own
// crashable in-memory FS for its queues and copies (the copies' syncs can
// be held), its own loopback cluster port and client listener, raft on
// disk.
func startNodes(t *testing.T) map[string]*clusterNode {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ids := []string{"n1", "n2", "n3"}
	lns, addrs := map[string]net.Listener{}, map[string]string{}
	clientLns := map[string]net.Listener{}
	for _, id := range ids {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[id], addrs[id] = ln, ln.Addr().String()
		if clientLns[id], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	nodes := map[string]*clusterNode{}
	for _, id := range ids {
		var peers []Peer
		for _, o := range ids {
			if o != id {
				peers = append(peers, Peer{ID: o, Addr: addrs[o]})
			}
		}
		fs := vfs.NewCrashableMem()
		g := &syncGate{}
		c, err := OpenCluster(ClusterOptions{
			Node: Options{ID: id, Dir: t.TempDir(), Listener: lns[id], Listen: addrs[id], Peers: peers,
				ClientAddr: clientLns[id].Addr().String(), Bootstrap: true, ElectionTimeout: testElection, Logger: quiet},
			ReplicaDir: "replicas", ReplicaFS: errorfs.Wrap(fs, g), ReplicaSegmentSize: 1 << 20,
		})
		if err != nil {
			t.Fatal(err)
		}
		b, err := appliance.Open(appliance.Options{DataDir: "data", FS: fs, Logger: quiet, SegmentSize: 1 << 20,
			MinFreeBytes: -1, Replication: c})
		if err != nil {
			t.Fatal(err)
		}
		c.Bind(b)
		srv, err := server.New(b, server.Options{Logger: quiet, Cluster: c})
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(clientLns[id])
		nodes[id] = &clusterNode{id: id, cluster: c, broker: b, syncs: g, addr: clientLns[id].Addr().String(), srv: srv}
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.syncs.release()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			n.srv.Shutdown(ctx)
			cancel()
			n.broker.Close()
			n.cluster.Close()
		}
	})
	for id, n := range nodes {
		await.Within(t, 30*time.Second, id+" to see 3 members", func() bool {
			return len(n.cluster.Node().State().Members) == 3
		})
	}
	return nodes
}

// declareOn declares through any node and returns the owner once it
// serves the queue.
func declareOn(t *testing.T, nodes map[string]*clusterNode, via string, cfg appliance.QueueConfig, policy string) *clusterNode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := nodes[via].cluster.DeclarePolicy(ctx, cfg, policy); err != nil {
		t.Fatalf("declare %s: %v", cfg.Name, err)
	}
	owner := nodes[nodes[via].cluster.Node().State().Assignments[cfg.Name][0].Owner]
	await.Within(t, 30*time.Second, owner.id+" to serve "+cfg.Name, func() bool {
		_, ok := owner.cluster.Gate(cfg.Name, 0)
		return ok
	})
	return owner
}

// Issue tests 1 and 3: both modes, 20,000 messages published and
// consumed; no delivery is ever above its partition's ceiling; every
// follower's log equals the owner's prefix record for record.
func TestClusterReplicatesBothModes(t *testing.T) {
	nodes := startNodes(t)
	const perQueue = 10000
	for _, q := range []struct {
		cfg    appliance.QueueConfig
		policy string
	}{
		{appliance.QueueConfig{Name: "durable-q", Durability: appliance.Durable, Partitions: 2}, "majority_durable"},
		{appliance.QueueConfig{Name: "buffered-q", Partitions: 2}, ""},
	} {
		t.Run(q.cfg.Name, func(t *testing.T) {
			owner := declareOn(t, nodes, "n2", q.cfg, q.policy)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var got atomic.Int64
			var above atomic.Value
			var sub *appliance.Subscription
			sub, err := owner.broker.Subscribe(q.cfg.Name, appliance.SubscribeOptions{Prefetch: 500, Deliver: func(d appliance.Delivery) {
				if g, _ := owner.cluster.Gate(d.Queue, d.Partition); d.Offset >= g.Ceiling() {
					above.Store(fmt.Sprintf("offset %d delivered at ceiling %d", d.Offset, g.Ceiling()))
				}
				got.Add(1)
				go sub.Ack(d.Tag)
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			publishN(t, owner.broker, q.cfg.Name, perQueue)
			await.Until(t, ctx, "every message delivered", func() bool { return got.Load() >= perQueue })
			if v := above.Load(); v != nil {
				t.Fatal(v)
			}
			for part := range q.cfg.Partitions {
				ol, _ := owner.cluster.OwnerLog(q.cfg.Name, part)
				a := owner.cluster.Node().State().Assignments[q.cfg.Name][part]
				for _, f := range a.Followers {
					fl, ok := nodes[f].cluster.Follower().Log(q.cfg.Name, part)
					if !ok {
						t.Fatalf("%s has no copy of %s/%d", f, q.cfg.Name, part)
					}
					n := min(fl.WrittenNext(), ol.WrittenNext())
					if n == 0 {
						t.Fatalf("%s copy of %s/%d is empty", f, q.cfg.Name, part)
					}
					want, have := waltest.Records(t, ol, n), waltest.Records(t, fl, n)
					for i := range want {
						if want[i].Type != have[i].Type || !bytes.Equal(want[i].Payload, have[i].Payload) {
							t.Fatalf("%s/%d record %d differs on %s", q.cfg.Name, part, i, f)
						}
					}
				}
			}
		})
	}
}

// Issue test 2: with the followers' syncs held, a buffered queue confirms
// (written on 2 of 3) while a durable one waits until they sync; with too
// few followers for the policy, a publish waits and times out with an
// error that names the missing copies.
func TestConfirmGateBoundary(t *testing.T) {
	nodes := startNodes(t)
	buf := declareOn(t, nodes, "n1", appliance.QueueConfig{Name: "b"}, "replica_buffered:3")
	dur := declareOn(t, nodes, "n1", appliance.QueueConfig{Name: "d"}, "replica_durable:3")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Warm both streams so the holds below catch only the publishes.
	for _, q := range []struct {
		n    *clusterNode
		name string
	}{{buf, "b"}, {dur, "d"}} {
		if _, err := q.n.broker.Publish(ctx, q.name, appliance.Message{Body: []byte("warm")}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		n.syncs.hold()
	}
	if _, err := buf.broker.Publish(ctx, "b", appliance.Message{Body: []byte("fast")}); err != nil {
		t.Fatalf("buffered publish with syncs held: %v", err)
	}
	g, _ := buf.cluster.Gate("b", 0)
	for f, p := range g.Positions() {
		if p.Durable >= 2 {
			t.Fatalf("follower %s reports durable %d while its syncs are held", f, p.Durable)
		}
	}
	confirmed := make(chan error, 1)
	dur.broker.PublishAsync("d", appliance.Message{Body: []byte("slow")}, func(_ appliance.Confirm, err error) { confirmed <- err })
	dg, _ := dur.cluster.Gate("d", 0)
	// Both followers have written it ...
	await.Until(t, ctx, "followers to write the durable publish", func() bool {
		for _, p := range dg.Positions() {
			if p.Written < 2 {
				return false
			}
		}
		return true
	})
	// ... yet it is not confirmed, because neither has synced it.
	select {
	case err := <-confirmed:
		t.Fatalf("durable publish confirmed with the followers' syncs held (err %v)", err)
	default:
	}
	for _, n := range nodes {
		n.syncs.release()
	}
	select {
	case err := <-confirmed:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("durable publish not confirmed after the syncs were released")
	}
	// Too few followers: stop one follower's store; replica_durable:3 waits.
	var follower string
	for _, f := range dur.cluster.Node().State().Assignments["d"][0].Followers {
		follower = f
	}
	nodes[follower].cluster.Follower().Close()
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	_, err := dur.broker.Publish(short, "d", appliance.Message{Body: []byte("stuck")})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "the policy needs 3") {
		t.Fatalf("publish with a follower down: %v, want a timeout naming the copies", err)
	}
}
