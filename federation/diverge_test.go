package federation

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/internal/waltest"
	"github.com/fibril-edge/fibril/wal"
)

// A buffered queue's owner loses its power: it comes back at its last
// sync, shorter than both followers, whose copies hold the 30 confirmed
// records it lost. Before recovery existed it resumed writing at its
// shorter end, wrote new records where the followers held others, and
// (before copies kept histories) confirmed them "written on 2 of 3"
// against copies holding different bytes. Now its reopened log is a new
// instance that writes nothing until the cluster installs an owner:
// every copy seals, the longest history (a follower's) wins, and the old
// owner follows it. Nothing confirmed is lost, and every copy ends up
// holding the same records.
func TestOwnerBackShorterRecoversTheLongestHistory(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "cut", Durability: appliance.Buffered}, "replica_buffered:2")
	settings := owner.broker.Settings()
	settings.BackgroundSyncIntervalMs = 0 // nothing syncs the owner's log but the test
	if err := owner.broker.UpdateSettings(settings); err != nil {
		t.Fatal(err)
	}
	publishN(t, owner.broker, "cut", "synced", 20)
	ol, _ := owner.cluster.OwnerLog("cut", 0)
	if err := ol.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	synced := ol.DurableNext()
	publishN(t, owner.broker, "cut", "lost", 30)
	nodes.copiesMatch(t, "cut", (*wal.Log).WrittenNext) // both followers hold all 50
	if ol.DurableNext() != synced {
		t.Fatalf("the owner synced past %d (at %d) before its power cut", synced, ol.DurableNext())
	}
	want := waltest.Records(t, ol, ol.WrittenNext())
	epoch := nodes.assignments(t, "cut")[0].Epoch

	owner.powerCut(t)
	next := nodes.servedAfter(t, "cut", epoch)
	if next.id == owner.id {
		t.Fatalf("%s, back with %d records, won over followers holding %d", owner.id, synced, len(want))
	}
	publishN(t, next.broker, "cut", "after", 5)
	copies := nodes.copiesMatch(t, "cut", (*wal.Log).WrittenNext)
	for _, have := range copies {
		for i, w := range want {
			if have[i].Offset != w.Offset || !bytes.Equal(have[i].Payload, w.Payload) {
				t.Fatalf("confirmed record %d lost or changed after the recovery", w.Offset)
			}
		}
	}
	if lf := next.cluster.Node().State().Queues["cut"].LastFailover; lf == nil || lf.From != owner.id || lf.To != next.id {
		t.Fatalf("last failover %+v", lf)
	}
}

// servedAfter waits until a node serves every partition of queue at an
// epoch above epoch, and returns it.
func (c testCluster) servedAfter(t *testing.T, queue string, epoch uint64) *clusterNode {
	t.Helper()
	var owner *clusterNode
	await.Within(t, time.Minute, fmt.Sprintf("a node to serve %s past epoch %d", queue, epoch), func() bool {
		for _, n := range c {
			if n.cluster == nil {
				continue
			}
			as := n.cluster.Node().State().Assignments[queue]
			if len(as) == 0 || as[0].Sealing || as[0].Epoch <= epoch || as[0].Owner != n.id {
				continue
			}
			for p := range as {
				if n.cluster.ownedWritable(queue, p) != nil {
					return false
				}
			}
			owner = n
			return true
		}
		return false
	})
	return owner
}

// The owner loses its power and stays down past the failover timeout:
// the queue moves to a follower and takes new publishes. The old owner
// then comes back at its last sync, shorter than the new owner's log,
// goes through recovery as a copy, and catches up: no offset holds
// different bytes on two copies, and nothing confirmed is lost.
func TestOwnerBackShorterAfterTheQueueMoved(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "moved", Durability: appliance.Buffered}, "replica_buffered:2")
	settings := owner.broker.Settings()
	settings.BackgroundSyncIntervalMs = 0
	if err := owner.broker.UpdateSettings(settings); err != nil {
		t.Fatal(err)
	}
	publishN(t, owner.broker, "moved", "confirmed", 40)
	nodes.copiesMatch(t, "moved", (*wal.Log).WrittenNext)
	epoch := nodes.assignments(t, "moved")[0].Epoch

	survived := owner.fs.CrashClone(vfs.CrashCloneCfg{}) // the power cut: nothing of the 40 was synced here
	owner.close()
	next := nodes.servedAfter(t, "moved", epoch)
	publishN(t, next.broker, "moved", "moved", 20)
	owner.useFS(survived)
	owner.restart(t)
	copies := nodes.copiesMatch(t, "moved", (*wal.Log).WrittenNext)
	// 40 publishes, the new owner's epoch marker, 20 publishes.
	if len(copies) != 2 || len(copies[0]) != 61 {
		t.Fatalf("after the old owner's return: %d copies, the first of %d records, want 2 of 61", len(copies), len(copies[0]))
	}
}

// The owner wrote and synced records no follower received (both were
// down; none was confirmed), then stopped. The followers recover the
// queue without them and the new owner writes other records at those
// offsets. When the old owner returns, its copy has diverged from the
// installed history: it is cut back to where they part, crash safe, and
// catches up, so every copy ends identical.
func TestDivergedCopyIsCutBack(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "split", Durability: appliance.Durable}, "replica_durable:2")
	a := nodes.assignments(t, "split")[0]
	publishN(t, owner.broker, "split", "shared", 10)
	nodes.copiesMatch(t, "split", (*wal.Log).DurableNext)
	for _, f := range a.Followers {
		nodes[f].close()
	}
	for i := range 5 { // appended and synced on the owner alone: never confirmed
		owner.broker.PublishAsync("split", appliance.Message{Body: []byte(fmt.Sprint("unconfirmed-", i))}, func(appliance.Confirm, error) {})
	}
	ol, _ := owner.cluster.OwnerLog("split", 0)
	await.Within(t, time.Minute, "the owner to sync its unconfirmed records", func() bool { return ol.DurableNext() >= 15 })
	owner.close()
	for _, f := range a.Followers {
		nodes[f].restart(t)
	}
	next := nodes.servedAfter(t, "split", a.Epoch)
	publishN(t, next.broker, "split", "new", 8)
	owner.restart(t)
	copies := nodes.copiesMatch(t, "split", (*wal.Log).DurableNext)
	for _, have := range copies {
		for _, r := range have {
			if bytes.HasPrefix(r.Payload, []byte("unconfirmed")) || bytes.Contains(r.Payload, []byte("unconfirmed-")) {
				t.Fatalf("a copy still holds the old owner's unconfirmed record at %d", r.Offset)
			}
		}
	}
}
