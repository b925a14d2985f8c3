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
