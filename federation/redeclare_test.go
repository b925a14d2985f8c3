package federation

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/wal"
)

// leadBy makes node id the raft leader.
func leadBy(t *testing.T, nodes testCluster, id string) {
	t.Helper()
	await.Within(t, 30*time.Second, id+" to lead", func() bool {
		if nodes[id].cluster.Node().IsLeader() {
			return true
		}
		for _, n := range nodes {
			if n.cluster != nil && n.cluster.Node().IsLeader() {
				n.cluster.node.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(nodes[id].clusterAddr)).Error()
			}
		}
		return false
	})
}

// A queue fails over, is deleted and declared again under its name; the
// new queue's owner is then lost too. The leader fails the new queue over
// as it did the old one: what it did for the old queue's epochs (asked
// for their recovery, sealed, installed) says nothing of the new queue's,
// which count from 1 again.
func TestRedeclaredQueueFailsOverAgain(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leadBy(t, nodes, "n3")
	cfg := appliance.QueueConfig{Name: "q", Durability: appliance.Durable}
	owner := nodes.declare(t, "n3", cfg, "")
	if owner.id != "n1" {
		t.Fatalf("q owned by %s, want n1", owner.id)
	}
	publishN(t, owner.broker, "q", "old", 20)
	nodes.copiesMatch(t, "q", (*wal.Log).WrittenNext)
	owner.close()
	first := nodes.servedAfter(t, "q", 1)
	t.Logf("first incarnation failed over to %s", first.id)
	owner.restart(t)

	if err := nodes["n3"].cluster.DeleteQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		await.Until(t, ctx, n.id+" to drop q", func() bool {
			_, ok := n.cluster.Node().State().Queues["q"]
			return !ok
		})
		await.Until(t, ctx, n.id+"'s broker to drop q", func() bool {
			_, err := n.broker.QueueInfo("q")
			return errors.Is(err, appliance.ErrNotFound)
		})
	}
	leadBy(t, nodes, "n3")
	owner = nodes.declare(t, "n3", cfg, "")
	if owner.id != "n1" {
		t.Fatalf("new q owned by %s, want n1", owner.id)
	}
	publishN(t, owner.broker, "q", "new", 20)
	nodes.copiesMatch(t, "q", (*wal.Log).WrittenNext)
	leadBy(t, nodes, "n3") // the node that asked for the old queue's recovery at epoch 1
	owner.close()
	next := nodes.servedAfter(t, "q", 1)
	t.Logf("second incarnation failed over to %s", next.id)
}
