package federation

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/federation/control"
	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/internal/waltest"
)

// openNode starts one cluster node with its broker on its own crashable
// in-memory FS (its copies' syncs can be held). With bootstrap it forms a
// cluster alone; otherwise it joins through peers.
func openNode(t *testing.T, id string, peers []Peer, bootstrap bool) *clusterNode {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fs := vfs.NewCrashableMem()
	g := &syncGate{}
	c, err := OpenCluster(ClusterOptions{
		Node: Options{ID: id, Dir: t.TempDir(), Listener: ln, Listen: ln.Addr().String(), Peers: peers,
			Bootstrap: bootstrap, ElectionTimeout: testElection, Logger: quiet},
		ReplicaDir: "replicas", ReplicaFS: errorfs.Wrap(fs, g), ReplicaSegmentSize: 1 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := appliance.Open(appliance.Options{DataDir: "data", FS: fs, Logger: quiet, SegmentSize: 1 << 20,
		MinFreeBytes: -1, Replication: c})
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	c.Bind(b)
	n := &clusterNode{id: id, cluster: c, broker: b, syncs: g}
	t.Cleanup(func() {
		g.release()
		b.Close()
		c.Close()
	})
	return n
}

// publishN publishes n messages and waits for every confirm.
func publishN(t *testing.T, b *appliance.Broker, queue string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		b.PublishAsync(queue, appliance.Message{Key: fmt.Sprint(i % 8), Body: []byte(fmt.Sprintf("%s-%d", queue, i))},
			func(_ appliance.Confirm, err error) {
				if err != nil {
					errs <- err
				}
				wg.Done()
			})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("publish to %s: %v", queue, err)
	}
}

// The first-boot order: node 1 bootstraps alone and declares its queues,
// publishes, and nodes 2 and 3 join later. Every partition gains two
// followers, whose copies catch up from offset 0 to the owner's log byte
// for byte, and the gates count the new copies with the policy's count.
func TestJoinersBecomeFollowers(t *testing.T) {
	n1 := openNode(t, "n1", nil, true)
	await.Within(t, 30*time.Second, "n1 to list itself", func() bool {
		return len(n1.cluster.Node().State().Members) == 1
	})
	nodes := map[string]*clusterNode{"n1": n1}
	queues := []struct {
		cfg      appliance.QueueConfig
		policy   string
		describe string // once three members host it
		needs    int
	}{
		{appliance.QueueConfig{Name: "orders", Durability: appliance.Durable, Partitions: 2}, "majority_durable", "durable on 2 of 3", 2},
		// Declared without a policy: replica_buffered:1 on one member,
		// a majority (replica_buffered:2) once three host it.
		{appliance.QueueConfig{Name: "readings"}, "", "written on 2 of 3", 2},
	}
	const perQueue = 500
	for _, q := range queues {
		if owner := declareOn(t, nodes, "n1", q.cfg, q.policy); owner != n1 {
			t.Fatalf("%s owned by %s on a one-member cluster", q.cfg.Name, owner.id)
		}
		publishN(t, n1.broker, q.cfg.Name, perQueue)
	}

	peers := []Peer{{ID: "n1", Addr: n1.cluster.Node().ClusterAddr()}}
	nodes["n2"] = openNode(t, "n2", peers, false)
	nodes["n3"] = openNode(t, "n3", peers, false)
	await.Within(t, 30*time.Second, "n1 to list 3 members", func() bool {
		return len(n1.cluster.Node().State().Members) == 3
	})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, q := range queues {
		for part := range q.cfg.Partitions {
			var a control.Assignment
			await.Until(t, ctx, fmt.Sprintf("%s/%d to gain two followers", q.cfg.Name, part), func() bool {
				a = n1.cluster.Node().State().Assignments[q.cfg.Name][part]
				return len(a.Followers) == 2
			})
			if a.Owner != "n1" || a.Epoch != 1 || a.Describe() != q.describe {
				t.Fatalf("%s/%d: %+v reads %q, want owner n1, epoch 1, %q", q.cfg.Name, part, a, a.Describe(), q.describe)
			}
			ol, _ := n1.cluster.OwnerLog(q.cfg.Name, part)
			end := ol.WrittenNext()
			if end == 0 {
				t.Fatalf("%s/%d owner log is empty", q.cfg.Name, part)
			}
			want := waltest.Records(t, ol, end)
			for _, f := range a.Followers {
				await.Until(t, ctx, fmt.Sprintf("%s's copy of %s/%d to reach %d", f, q.cfg.Name, part, end), func() bool {
					fl, ok := nodes[f].cluster.Follower().Log(q.cfg.Name, part)
					return ok && fl.DurableNext() >= end
				})
				fl, _ := nodes[f].cluster.Follower().Log(q.cfg.Name, part)
				have := waltest.Records(t, fl, end)
				for i := range want {
					if want[i].Offset != have[i].Offset || want[i].Type != have[i].Type || !bytes.Equal(want[i].Payload, have[i].Payload) {
						t.Fatalf("%s/%d record %d differs on %s", q.cfg.Name, part, i, f)
					}
				}
			}
			g, ok := n1.cluster.Gate(q.cfg.Name, part)
			if !ok {
				t.Fatalf("n1 has no gate for %s/%d", q.cfg.Name, part)
			}
			wantPending := fmt.Sprintf("on 3 of 3 copies, the policy needs %d", q.needs)
			await.Until(t, ctx, fmt.Sprintf("the gate of %s/%d to count both copies", q.cfg.Name, part), func() bool {
				return strings.HasSuffix(g.Pending(end), wantPending)
			})
			if floor := g.Floor(); floor < end {
				t.Fatalf("%s/%d floor %d, want at least %d once both copies are durable", q.cfg.Name, part, floor, end)
			}
			// The owner's view shows its own log beside both copies, caught up.
			pv := partitionView(t, n1.cluster.View(), q.cfg.Name, part)
			if pv.Log == nil || pv.Log.WrittenNext != end || len(pv.Progress) != 2 {
				t.Fatalf("%s/%d view on the owner: log %+v, progress %+v; want log at %d and two followers", q.cfg.Name, part, pv.Log, pv.Progress, end)
			}
			for f, p := range pv.Progress {
				if p.WrittenNext != end || p.DurableNext != end || p.CatchingUp {
					t.Fatalf("%s/%d view: %s at %+v, want %d/%d pushing", q.cfg.Name, part, f, p, end, end)
				}
			}
		}
	}

	// A new durable publish now waits for a follower's sync: with both
	// followers' syncs held, the followers write it but it is not
	// confirmed until the syncs pass.
	for _, f := range []string{"n2", "n3"} {
		nodes[f].syncs.hold()
	}
	written := func() (owner uint64, followersDone bool) {
		followersDone = true
		for p := range 2 {
			ol, _ := n1.cluster.OwnerLog("orders", p)
			g, _ := n1.cluster.Gate("orders", p)
			end := ol.WrittenNext()
			owner += end
			for _, pos := range g.Positions() {
				followersDone = followersDone && pos.Written >= end
			}
		}
		return owner, followersDone
	}
	before, _ := written()
	confirmed := make(chan error, 1)
	n1.broker.PublishAsync("orders", appliance.Message{Key: "late", Body: []byte("after the joins")},
		func(_ appliance.Confirm, err error) { confirmed <- err })
	await.Until(t, ctx, "both followers to write the new publish", func() bool {
		owner, done := written()
		return owner == before+1 && done
	})
	select {
	case err := <-confirmed:
		t.Fatalf("durable publish confirmed with both followers' syncs held (err %v)", err)
	default:
	}
	for _, f := range []string{"n2", "n3"} {
		nodes[f].syncs.release()
	}
	select {
	case err := <-confirmed:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("durable publish not confirmed after the syncs were released")
	}
}

// partitionView finds one partition in a cluster view.
func partitionView(t *testing.T, v View, queue string, partition int) PartitionView {
	t.Helper()
	for _, q := range v.Queues {
		if q.Name != queue {
			continue
		}
		for _, p := range q.Partitions {
			if p.Partition == partition {
				return p
			}
		}
	}
	t.Fatalf("no %s/%d in the view %+v", queue, partition, v)
	return PartitionView{}
}
