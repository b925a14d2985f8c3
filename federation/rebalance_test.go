package federation

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/admin"
	"github.com/fibril-edge/fibril/federation/control"
	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/wal"
)

// The first-boot order: node 1 bootstraps alone and declares its queues,
// publishes, and nodes 2 and 3 join later. Every partition gains two
// followers, whose copies catch up from offset 0 to the owner's log byte
// for byte, and the gates count the new copies with the policy's count.
func TestJoinersBecomeFollowers(t *testing.T) {
	nodes := startLone(t, "n1", nodeOptions{})
	n1 := nodes["n1"]
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
		if owner := nodes.declare(t, "n1", q.cfg, q.policy); owner != n1 {
			t.Fatalf("%s owned by %s on a one-member cluster", q.cfg.Name, owner.id)
		}
		publishN(t, n1.broker, q.cfg.Name, q.cfg.Name, perQueue)
	}

	nodes.join(t, "n2", "n1", nodeOptions{})
	nodes.join(t, "n3", "n1", nodeOptions{})
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
			if a.Owner != "n1" || a.Epoch != 1 || a.Describe(q.cfg.Durability) != q.describe {
				t.Fatalf("%s/%d: %+v reads %q, want owner n1, epoch 1, %q", q.cfg.Name, part, a, a.Describe(q.cfg.Durability), q.describe)
			}
			end, _ := nodes.partitionCopies(t, q.cfg.Name, a, (*wal.Log).DurableNext)
			if end == 0 {
				t.Fatalf("%s/%d owner log is empty", q.cfg.Name, part)
			}
			g, ok := n1.cluster.Gate(q.cfg.Name, part)
			if !ok {
				t.Fatalf("n1 has no gate for %s/%d", q.cfg.Name, part)
			}
			wantPending := fmt.Sprintf("on 3 of 3 copies, the policy needs %d", q.needs)
			await.Until(t, ctx, fmt.Sprintf("the gate of %s/%d to count both copies", q.cfg.Name, part), func() bool {
				return strings.HasSuffix(g.Pending(end), wantPending)
			})
			if floor := g.Floor(0); floor < end {
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
		nodes[f].syncs.Shut()
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
	confirmOnRelease(t, ctx, confirmed, nodes["n2"], nodes["n3"])
}

// partitionView finds one partition in a cluster view.
func partitionView(t *testing.T, v admin.ClusterView, queue string, partition int) admin.ClusterPartition {
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
	return admin.ClusterPartition{}
}
