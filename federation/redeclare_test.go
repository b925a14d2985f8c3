package federation

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
	nodes, owner, ctx := oldQueueOnN1(t)
	cfg := appliance.QueueConfig{Name: "q", Durability: appliance.Durable}
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

// The owner is down while its queue is deleted and declared again, and
// the new queue is placed on it once more. When it comes back, its broker
// still holds the old queue's log and checkpoint under that name: none of
// it may reach the new queue, whichever comes first, the old owner's
// return or the new queue's failover, and wherever the new queue ends up
// served.
func TestRedeclaredWhileItsOwnerWasDown(t *testing.T) {
	nodes, owner, ctx := redeclaredWhileDown(t, appliance.QueueConfig{Name: "q", Durability: appliance.Durable})
	owner.restart(t)
	served := nodes.servedAfter(t, "q", 0)
	publishN(t, served.broker, "q", "new", 10)
	if got := consumeBodies(t, ctx, served.broker, "q", 10); !onlyPrefix(got, "new-") {
		t.Fatalf("the new q, served by %s, delivered %q", served.id, got)
	}
	nodes.copiesMatch(t, "q", (*wal.Log).WrittenNext)
	// And once more on another node: no copy of the new queue holds an
	// old record.
	epoch := nodes.assignments(t, "q")[0].Epoch
	publishN(t, served.broker, "q", "later", 5)
	nodes.copiesMatch(t, "q", (*wal.Log).WrittenNext)
	served.close()
	next := nodes.servedAfter(t, "q", epoch)
	// Acks may not have reached the copies before the failover: "new"
	// messages may come again, and nothing else.
	got := consumeUntil(t, ctx, next.broker, "q", func(got []string) bool {
		return len(slices.DeleteFunc(slices.Clone(got), func(b string) bool { return !strings.HasPrefix(b, "later-") })) == 5
	})
	if slices.ContainsFunc(got, func(b string) bool { return !strings.HasPrefix(b, "new-") && !strings.HasPrefix(b, "later-") }) {
		t.Fatalf("the new q, failed over to %s, delivered %q", next.id, got)
	}
	served.restart(t)
}

// oldQueueOnN1 starts three nodes led by n3 and declares the durable
// queue q, owned by n1, with messages old-0..19; it returns a context
// for the test's requests.
func oldQueueOnN1(t *testing.T) (testCluster, *clusterNode, context.Context) {
	t.Helper()
	nodes := startNodes(t, 3, nodeOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	leadBy(t, nodes, "n3")
	owner := nodes.declare(t, "n3", appliance.QueueConfig{Name: "q", Durability: appliance.Durable}, "")
	if owner.id != "n1" {
		t.Fatalf("q owned by %s, want n1", owner.id)
	}
	publishN(t, owner.broker, "q", "old", 20)
	return nodes, owner, ctx
}

// redeclaredWhileDown is oldQueueOnN1 with some of the old messages
// acked; then it stops n1 and deletes q and declares it again as again,
// placed on n1. It returns with n1 down.
func redeclaredWhileDown(t *testing.T, again appliance.QueueConfig) (testCluster, *clusterNode, context.Context) {
	t.Helper()
	nodes, owner, ctx := oldQueueOnN1(t)
	consumeBodies(t, ctx, owner.broker, "q", 5) // some acked: the old queue's checkpoint has state
	nodes.copiesMatch(t, "q", (*wal.Log).WrittenNext)
	owner.close()
	if err := nodes["n3"].cluster.DeleteQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := nodes["n3"].cluster.DeclarePolicy(ctx, again, ""); err != nil {
		t.Fatal(err)
	}
	if o := nodes["n3"].cluster.Node().State().Assignments["q"][0].Owner; o != "n1" {
		t.Fatalf("the new q is placed on %s, want n1 (down)", o)
	}
	return nodes, owner, ctx
}

// consumeBodies takes n messages from queue on b, acks them, and returns
// their bodies.
func consumeBodies(t *testing.T, ctx context.Context, b *appliance.Broker, queue string, n int) []string {
	t.Helper()
	return consumeUntil(t, ctx, b, queue, func(got []string) bool { return len(got) >= n })
}

// consumeUntil takes messages from queue on b, acking each, until done
// says the bodies taken are enough, and returns them.
func consumeUntil(t *testing.T, ctx context.Context, b *appliance.Broker, queue string, done func([]string) bool) []string {
	t.Helper()
	got := make(chan string, 1024)
	var sub *appliance.Subscription
	subscribed := make(chan struct{}) // sub is set
	sub, err := b.Subscribe(queue, appliance.SubscribeOptions{Prefetch: 1, Deliver: func(d appliance.Delivery) {
		got <- string(d.Body)
		go func() {
			<-subscribed
			sub.Ack(d.Tag)
		}()
	}})
	if err != nil {
		t.Fatalf("subscribe to %s: %v", queue, err)
	}
	close(subscribed)
	defer sub.Close()
	var bodies []string
	for !done(bodies) {
		select {
		case body := <-got:
			bodies = append(bodies, body)
		case <-ctx.Done():
			t.Fatalf("not every message from %s; these came: %q", queue, bodies)
		}
	}
	return bodies
}

func onlyPrefix(bodies []string, prefix string) bool {
	for _, b := range bodies {
		if !strings.HasPrefix(b, prefix) {
			return false
		}
	}
	return true
}

// TestRedeclaredWhileItsOwnerWasDown, made sure: the old owner restarts
// while the rest of the cluster is down, so its broker opens the old
// declaration's log (and its state replays only its own raft log, the old
// declaration) before the new declaration reaches it. No copy of the new
// queue holds an old record, and none is delivered.
func TestRedeclaredOwnerBackAloneOpensTheOldLog(t *testing.T) {
	nodes, owner, ctx := redeclaredWhileDown(t, appliance.QueueConfig{Name: "q", Durability: appliance.Durable})
	for _, id := range []string{"n2", "n3"} {
		await.Until(t, ctx, id+" to apply the new q", func() bool {
			q, ok := nodes[id].cluster.Node().State().Queues["q"]
			return ok && q.Incarnation > 0 && nodes[id].cluster.Node().State().Assignments["q"][0].Owner == "n1"
		})
	}
	nodes["n2"].close()
	nodes["n3"].close()
	owner.restart(t) // alone: no leader, its state is empty until one is back
	if _, err := owner.broker.QueueInfo("q"); err != nil {
		t.Fatalf("n1's broker did not open the old q: %v", err)
	}
	nodes["n2"].restart(t)
	nodes["n3"].restart(t)
	served := nodes.servedAfter(t, "q", 0)
	publishN(t, served.broker, "q", "new", 10)
	if got := consumeBodies(t, ctx, served.broker, "q", 10); !onlyPrefix(got, "new-") {
		t.Fatalf("the new q, served by %s, delivered %q", served.id, got)
	}
	for i, recs := range nodes.copiesMatch(t, "q", (*wal.Log).WrittenNext) {
		for _, r := range recs {
			if bytes.Contains(r.Payload, []byte("old-")) {
				t.Fatalf("copy %d of the new q holds an old record at offset %d (%d records)", i, r.Offset, len(recs))
			}
		}
	}
}

// The old owner comes back after its queue was deleted and declared again
// on other nodes only. Its broker opened the old declaration's log at
// start: it closes that queue, which is no longer its to serve, and the
// old log is collected.
func TestRedeclaredElsewhereWhileItsOwnerWasDown(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leadBy(t, nodes, "n3")
	if err := nodes["n3"].cluster.Node().SetSettings(ctx, map[string]string{"replicas": "2"}); err != nil {
		t.Fatal(err)
	}
	cfg := appliance.QueueConfig{Name: "q", Durability: appliance.Durable}
	owner := nodes.declare(t, "n3", cfg, "")
	if owner.id != "n1" {
		t.Fatalf("q owned by %s, want n1", owner.id)
	}
	old := nodes.assignments(t, "q")[0].Incarnation
	publishN(t, owner.broker, "q", "old", 20)
	nodes.copiesMatch(t, "q", (*wal.Log).WrittenNext)
	owner.close()
	if err := nodes["n3"].cluster.DeleteQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	// Load n1 so that the new q goes elsewhere.
	if _, _, err := nodes["n3"].cluster.DeclarePolicy(ctx, appliance.QueueConfig{Name: "pad", Durability: appliance.Durable}, ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := nodes["n3"].cluster.DeclarePolicy(ctx, cfg, ""); err != nil {
		t.Fatal(err)
	}
	a := nodes["n3"].cluster.Node().State().Assignments["q"][0]
	for _, id := range a.Copies() {
		if id == "n1" {
			t.Fatalf("the new q is placed on n1: %+v", a)
		}
	}
	owner.restart(t)
	await.Until(t, ctx, "n1 to apply the new q", func() bool {
		q, ok := owner.cluster.Node().State().Queues["q"]
		return ok && q.Incarnation == a.Incarnation
	})
	oldDir := "replicas/q/" + itoa(old) + "/0"
	await.Until(t, ctx, "n1 to close the old declaration and remove its log", func() bool {
		_, err := owner.broker.QueueInfo("q")
		_, statErr := owner.replicaFS.Stat(oldDir)
		return errors.Is(err, appliance.ErrNotFound) && statErr != nil
	})
}

func itoa(u uint64) string { return strconv.FormatUint(u, 10) }

func ownedKeys(c *Cluster) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for k, op := range c.owned {
		out = append(out, k+"@"+itoa(op.incarnation))
	}
	return out
}

// A node whose raft state is lost (its data intact) opens with an empty
// state that counts as replayed at once. It closes and collects nothing
// before it has caught up with its leader: the queue it owned is still
// assigned to it, and its copy survives.
func TestWipedRaftStateKeepsTheCopiesUntilCaughtUp(t *testing.T) {
	nodes, owner, ctx := oldQueueOnN1(t)
	nodes.copiesMatch(t, "q", (*wal.Log).WrittenNext)
	owner.close()
	// Keep the leader from answering the restarted node for a while.
	owner.raftDir = t.TempDir()
	owner.bootstrap = false
	before := len(owner.removed.under("replicas/q"))
	owner.restart(t)
	await.Until(t, ctx, owner.id+" to learn q from the leader", func() bool {
		_, ok := owner.cluster.Node().State().Queues["q"]
		return ok && owner.cluster.node.liveKnown()
	})
	if removed := owner.removed.under("replicas/q")[before:]; len(removed) > 0 {
		t.Fatalf("the wiped node removed %v before it learnt the state", removed)
	}
}

// Deletes and declarations of one name race on its owner: whatever the
// interleaving, once they settle a queue the cluster has this node serve
// is open in its broker (a delete of the name the cluster no longer knows
// does not reach into the broker for a queue declared meanwhile).
func TestRacingDeletesKeepTheRedeclaredQueueServed(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leadBy(t, nodes, "n3")
	n1 := nodes["n1"]
	cfg := appliance.QueueConfig{Name: "q", Durability: appliance.Durable}
	nodes.declare(t, "n3", cfg, "")
	deadline := time.Now().Add(10 * time.Second)
	for round := 0; time.Now().Before(deadline); round++ {
		done := make(chan struct{})
		go func() {
			defer close(done)
			time.Sleep(time.Duration(round%7) * 300 * time.Microsecond)
			_ = n1.cluster.DeleteQueue(ctx, "q")
		}()
		_ = n1.cluster.DeleteQueue(ctx, "q")
		_, _, _ = n1.cluster.DeclarePolicy(ctx, cfg, "")
		<-done
		// Settle: the state and this node's broker agree again.
		var st = n1.cluster.Node().State()
		q, ok := st.Queues["q"]
		if !ok || st.Assignments["q"][0].Owner != "n1" {
			_, _, _ = n1.cluster.DeclarePolicy(ctx, cfg, "")
			continue
		}
		await.Within(t, 30*time.Second, "n1 to serve the state's q", func() bool {
			n1.cluster.declaredMu.Lock()
			defer n1.cluster.declaredMu.Unlock()
			inc, ok := n1.cluster.declared["q"]
			return ok && inc == q.Incarnation
		})
		if _, err := n1.broker.QueueInfo("q"); err != nil {
			t.Fatalf("round %d: the cluster has q (incarnation %d) served by n1, but n1's broker: %v", round, q.Incarnation, err)
		}
	}
}

// A follower whose raft state was lost (its data intact) comes back after
// a queue it held a copy of was deleted: once it has caught up with its
// leader, it removes that copy.
func TestWipedRaftStateCollectsOnceCaughtUp(t *testing.T) {
	nodes, _, ctx := oldQueueOnN1(t)
	a := nodes.assignments(t, "q")[0]
	var f *clusterNode
	for _, id := range a.Followers {
		if id != "n3" {
			f = nodes[id]
		}
	}
	if f == nil {
		t.Fatalf("q's followers %v: none besides the leader", a.Followers)
	}
	await.Until(t, ctx, f.id+" to hold q's copy", func() bool {
		names, err := f.replicaFS.List("replicas/q")
		return err == nil && len(names) > 0
	})
	f.close()
	if err := nodes["n3"].cluster.DeleteQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	// Commands after the delete: the leader's applied index, where the
	// wiped node counts as caught up, is past it.
	for i := range 3 {
		if _, _, err := nodes["n3"].cluster.DeclarePolicy(ctx, appliance.QueueConfig{Name: fmt.Sprintf("later%d", i)}, ""); err != nil {
			t.Fatal(err)
		}
	}
	f.raftDir = t.TempDir()
	f.bootstrap = false
	before := len(f.removed.under("replicas/q"))
	f.restart(t)
	await.Until(t, ctx, f.id+" to catch up", func() bool {
		return f.cluster.node.liveKnown() && f.cluster.Node().State().Applied >= f.cluster.node.liveFrom.Load()
	})
	// More commands: every one wakes the collection.
	for i := range 3 {
		if _, _, err := nodes["n3"].cluster.DeclarePolicy(ctx, appliance.QueueConfig{Name: fmt.Sprintf("after%d", i)}, ""); err != nil {
			t.Fatal(err)
		}
	}
	await.Until(t, ctx, f.id+" to remove its copy of the deleted q", func() bool { return len(f.removed.under("replicas/q")) > before })
}

// The owner is down while its queue is deleted and declared again with
// other settings, placed on it; it comes back with its broker opened only
// once its state has replayed (the new declaration known). The broker's
// start reopens its own log under its own (old) declaration; that queue is
// closed as another declaration's, and the new one is served with its own
// settings and none of the old messages.
func TestRedeclaredWithOtherSettingsWhileItsOwnerWasDown(t *testing.T) {
	nodes, owner, ctx := redeclaredWhileDown(t, appliance.QueueConfig{Name: "q", Durability: appliance.Buffered, Partitions: 2})
	owner.brokerLate = true
	owner.restart(t)
	served := nodes.servedAfter(t, "q", 0)
	await.Until(t, ctx, served.id+" to serve q with its new settings", func() bool {
		in, err := served.broker.QueueInfo("q")
		return err == nil && in.Config.Partitions == 2 && in.Config.Durability == appliance.Buffered
	})
	publishN(t, served.broker, "q", "new", 10)
	if got := consumeBodies(t, ctx, served.broker, "q", 10); !onlyPrefix(got, "new-") {
		t.Fatalf("the new q, served by %s, delivered %q", served.id, got)
	}
}
