package federation

import (
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/wal"
)

// A node's copies follow its broker's storage.background_sync_interval_ms,
// changed live: off, a buffered queue's copy holds what it was pushed
// without syncing it; set again, the copy syncs it in the background.
func TestCopiesFollowTheSyncIntervalLive(t *testing.T) {
	nodes := startNodes(t, 2, nodeOptions{})
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "b", Durability: appliance.Buffered}, "replica_buffered:2")
	f := nodes.other(owner)
	setInterval := func(ms int) {
		t.Helper()
		s := f.broker.Settings()
		s.BackgroundSyncIntervalMs = ms
		if err := f.broker.UpdateSettings(s); err != nil {
			t.Fatal(err)
		}
	}
	setInterval(0)
	publishN(t, owner.broker, "b", "off", 50)
	nodes.copiesMatch(t, "b", (*wal.Log).WrittenNext)
	l, ok := f.cluster.Follower().Log("b", 0)
	if !ok {
		t.Fatal("no copy")
	}
	if d := l.DurableNext(); d >= 50 {
		t.Fatalf("with the background sync off the copy synced to %d", d)
	}
	setInterval(10)
	await.Within(t, time.Minute, "the copy to sync in the background", func() bool { return l.DurableNext() >= 50 })
}

// A node that names a cluster default policy (fibrild's [cluster]
// default_policy) makes it the cluster's setting once it reaches the
// leader; queues declared afterwards without a mode, through any node,
// take its mode and count, and a declare naming a mode still wins.
func TestEnsureDefaultPolicy(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	nodes["n3"].cluster.EnsureSettings(map[string]string{"default_policy": "replica_buffered:2"})
	await.Within(t, time.Minute, "every node to hold the cluster default", func() bool {
		for _, n := range nodes {
			if n.cluster.Node().State().Settings["default_policy"] != "replica_buffered:2" {
				return false
			}
		}
		return true
	})
	st := nodes.declare(t, "n1", appliance.QueueConfig{Name: "plain"}, "").cluster.Node().State()
	if q := st.Queues["plain"]; q.Config.Durability != appliance.Buffered || q.Policy.String() != "replica_buffered:2" {
		t.Fatalf("plain: %s, %s", q.Config.Durability, q.Policy)
	}
	if d := st.Assignments["plain"][0].Describe(appliance.Buffered); d != "written on 2 of 3" {
		t.Fatalf("plain reads %q", d)
	}
	st = nodes.declare(t, "n2", appliance.QueueConfig{Name: "named", Durability: appliance.Durable}, "").cluster.Node().State()
	if q := st.Queues["named"]; q.Config.Durability != appliance.Durable || q.Policy.String() != "replica_durable:2" {
		t.Fatalf("named: %s, %s", q.Config.Durability, q.Policy)
	}
}
