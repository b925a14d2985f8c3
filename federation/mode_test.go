package federation

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/internal/waltest"
	"github.com/fibril-edge/fibril/wal"
)

// publishConfirms publishes n messages with bodies prefix-i, one after
// the other, and returns their confirms.
func publishConfirms(t *testing.T, b *appliance.Broker, queue, prefix string, n int) []appliance.Confirm {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := make([]appliance.Confirm, 0, n)
	for i := range n {
		cf, err := b.Publish(ctx, queue, appliance.Message{Body: fmt.Appendf(nil, "%s-%d", prefix, i)})
		if err != nil {
			t.Fatalf("publish %s-%d to %s: %v", prefix, i, queue, err)
		}
		out = append(out, cf)
	}
	return out
}

// wantModes fails unless every confirm states mode d.
func wantModes(t *testing.T, cfs []appliance.Confirm, d appliance.Durability, when string) {
	t.Helper()
	for _, cf := range cfs {
		if cf.Durability != d {
			t.Fatalf("%s: the confirm of offset %d states %s, want %s", when, cf.Offset, cf.Durability, d)
		}
	}
}

// A buffered queue on three nodes changes to durable through a node that
// does not own it, with its followers syncing nothing in the background:
// the change syncs every copy past the fence and then takes effect, the
// confirms before it state buffered and those after it durable, and a
// power cut of every node at once loses none of them (the change made
// the buffered ones durable on every copy; the durable ones were durable
// on two before their confirm).
func TestModeChangeToDurableInTheCluster(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "mc", Durability: appliance.Buffered}, "replica_buffered:2")
	a := nodes.assignments(t, "mc")[0]
	for _, f := range a.Followers {
		s := nodes[f].broker.Settings()
		s.BackgroundSyncIntervalMs = 0 // the copies sync only when asked
		if err := nodes[f].broker.UpdateSettings(s); err != nil {
			t.Fatal(err)
		}
	}
	wantModes(t, publishConfirms(t, owner.broker, "mc", "before", 20), appliance.Buffered, "before the change")

	via := nodes[a.Followers[0]]
	q, pending, err := via.cluster.SetMode(t.Context(), "mc", appliance.Durable)
	if err != nil || pending || q.Config.Durability != appliance.Durable {
		t.Fatalf("SetMode through %s: %+v, pending %v, %v", via.id, q, pending, err)
	}
	for _, f := range a.Followers {
		l, _ := nodes[f].cluster.Follower().Log("mc", 0)
		if l.DurableNext() < 20 {
			t.Fatalf("%s's copy is durable to %d after the change to durable, want past the 20 records before it", f, l.DurableNext())
		}
	}
	wantModes(t, publishConfirms(t, owner.broker, "mc", "after", 30), appliance.Durable, "after the change")
	for _, n := range nodes {
		if got := n.cluster.Node().State().Queues["mc"]; got.Config.Durability != appliance.Durable || got.ModeChange != nil {
			t.Fatalf("%s's control state has %s with change %+v, want durable in effect", n.id, got.Config.Durability, got.ModeChange)
		}
	}

	ol, _ := owner.cluster.OwnerLog("mc", 0)
	want := waltest.Records(t, ol, ol.WrittenNext())
	ids := []string{owner.id, a.Followers[0], a.Followers[1]}
	var survived []*vfs.MemFS
	for _, id := range ids {
		survived = append(survived, nodes[id].fs.CrashClone(vfs.CrashCloneCfg{}))
	}
	for _, id := range ids {
		nodes[id].close()
	}
	for i, id := range ids {
		nodes[id].useFS(survived[i])
		nodes[id].restart(t)
	}
	next := nodes.servedAfter(t, "mc", a.Epoch)
	wantModes(t, publishConfirms(t, next.broker, "mc", "recovered", 3), appliance.Durable, "after the recovery")
	nodes.copiesHold(t, "mc", (*wal.Log).DurableNext, want, "record %d, confirmed before the power cut, missing or changed after it")
}

// A change to durable whose policy counts every copy waits for a
// follower that cannot sync: it stays pending (the count is never
// lowered), a publish meanwhile is not confirmed until that copy holds
// it durable, and the change takes effect once the follower syncs again.
func TestModeChangeWaitsForEveryCountedCopy(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "wait", Durability: appliance.Buffered}, "replica_buffered:3")
	a := nodes.assignments(t, "wait")[0]
	publishConfirms(t, owner.broker, "wait", "before", 10)
	slow := nodes[a.Followers[1]]
	slow.syncs.Shut()
	publishConfirms(t, owner.broker, "wait", "unsynced", 10) // written on every copy, never synced on slow's

	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	_, pending, err := nodes[a.Followers[0]].cluster.SetMode(ctx, "wait", appliance.Durable)
	cancel()
	if err != nil || !pending {
		t.Fatalf("SetMode with %s's syncs shut: pending %v, %v; want pending", slow.id, pending, err)
	}
	if got := owner.cluster.Node().State().Queues["wait"]; got.Config.Durability != appliance.Buffered || got.ModeChange == nil {
		t.Fatalf("pending change: the control state has %s with change %+v", got.Config.Durability, got.ModeChange)
	}
	confirmed := make(chan error, 1)
	var cf appliance.Confirm
	owner.broker.PublishAsync("wait", appliance.Message{Body: []byte("during")}, func(c appliance.Confirm, err error) {
		cf = c
		confirmed <- err
	})
	confirmOnRelease(t, t.Context(), confirmed, slow)
	if cf.Durability != appliance.Durable {
		t.Fatalf("a publish during the pending change confirmed as %s, want durable", cf.Durability)
	}
	await.Within(t, time.Minute, "the change to take effect once every copy syncs", func() bool {
		q := owner.cluster.Node().State().Queues["wait"]
		return q.Config.Durability == appliance.Durable && q.ModeChange == nil
	})
}

// The owner is replaced while a change to durable is pending: the new
// owner finds it in the control state and carries it out, and the change
// takes effect once the copies it counts can sync. It is never half
// applied: until then the queue is buffered in the control state.
func TestModeChangeSurvivesAnOwnerReplacement(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "move", Durability: appliance.Buffered}, "replica_buffered:2")
	a := nodes.assignments(t, "move")[0]
	publishConfirms(t, owner.broker, "move", "before", 10)
	for _, f := range a.Followers {
		nodes[f].syncs.Shut()
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	_, pending, err := nodes[a.Followers[0]].cluster.SetMode(ctx, "move", appliance.Durable)
	cancel()
	if err != nil || !pending {
		t.Fatalf("SetMode with every follower's syncs shut: pending %v, %v; want pending", pending, err)
	}
	owner.close()
	for _, f := range a.Followers {
		nodes[f].syncs.Open()
	}
	next := nodes.servedAfter(t, "move", a.Epoch)
	if q := next.cluster.Node().State().Queues["move"]; q.Config.Durability == appliance.Durable && q.ModeChange != nil {
		t.Fatalf("half applied: %+v", q)
	}
	owner.restart(t) // a follower now: the policy's two copies exist again
	await.Within(t, time.Minute, "the new owner "+next.id+" to carry the change out", func() bool {
		q := next.cluster.Node().State().Queues["move"]
		return q.Config.Durability == appliance.Durable && q.ModeChange == nil
	})
	wantModes(t, publishConfirms(t, next.broker, "move", "after", 5), appliance.Durable, "after the change, on the new owner")
}

// A change to buffered is put in effect before the owner admits
// publishes under the weaker rule: the confirms after it state buffered,
// and every node's control state has it.
func TestModeChangeToBufferedInTheCluster(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "down", Durability: appliance.Durable}, "")
	wantModes(t, publishConfirms(t, owner.broker, "down", "before", 10), appliance.Durable, "before the change")
	q, pending, err := owner.cluster.SetMode(t.Context(), "down", appliance.Buffered)
	if err != nil || pending || q.Config.Durability != appliance.Buffered {
		t.Fatalf("SetMode: %+v, pending %v, %v", q, pending, err)
	}
	await.Within(t, time.Minute, "the owner's broker to follow", func() bool {
		in, err := owner.broker.QueueInfo("down")
		return err == nil && in.Config.Durability == appliance.Buffered
	})
	wantModes(t, publishConfirms(t, owner.broker, "down", "after", 10), appliance.Buffered, "after the change")
	if _, _, err := owner.cluster.SetMode(t.Context(), "down", appliance.Buffered); err != nil {
		t.Fatalf("asking again for the mode in effect: %v", err)
	}
}
