package federation

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/fibril-edge/fibril/appliance"

	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/internal/waltest"
	"github.com/fibril-edge/fibril/wal"
)

// The owner of a queue stops (its node gone for good): the leader notices
// within the failover timeout, the two followers seal, one becomes the
// owner with the queue's state, and clients publishing through the other
// node go on. Nothing confirmed is lost, acked messages stay settled, a
// publish retried with its message id is a duplicate, and the new owner
// delivers every unsettled message.
func TestOwnerLossFailsOver(t *testing.T) {
	for _, tc := range []struct {
		mode   appliance.Durability
		policy string
	}{{appliance.Buffered, "replica_buffered:2"}, {appliance.Durable, ""}} {
		t.Run(tc.mode.String(), func(t *testing.T) { ownerLossFailsOver(t, tc.mode, tc.policy) })
	}
}

func ownerLossFailsOver(t *testing.T, mode appliance.Durability, policy string) {
	nodes := startNodes(t, 3, nodeOptions{clients: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "jobs", Durability: mode, DedupeWindow: 10 * time.Minute}, policy)
	epoch := nodes.assignments(t, "jobs")[0].Epoch
	var via *clusterNode // a node that is not the owner, and stays up
	for _, n := range nodes {
		if n != owner && (via == nil || n.id < via.id) {
			via = n
		}
	}
	pub := via.dial(t, ctx)
	const total, acked = 200, 50
	for i := range total {
		if _, err := pub.Publish(ctx, "jobs", client.Message{ID: fmt.Sprintf("m%d", i), Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	cons, err := owner.dial(t, ctx).Consume(ctx, "jobs", 1)
	if err != nil {
		t.Fatal(err)
	}
	for range acked {
		select {
		case d := <-cons.Messages():
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("deliveries before the failover")
		}
	}
	cons.Close()
	nodes.copiesMatch(t, "jobs", writtenFrontier(mode)) // the acks too

	killed := time.Now()
	owner.close()
	delete(nodes, owner.id) // gone for good
	// Publishes through the node that stays go on, each retried until
	// the new owner confirms it.
	var firstConfirm time.Duration
	for i := total; i < total+20; i++ {
		for {
			_, err := pub.Publish(ctx, "jobs", client.Message{ID: fmt.Sprintf("m%d", i), Body: []byte(fmt.Sprint(i))})
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("publish %d after the owner's loss: %v", i, err)
			}
		}
		if firstConfirm == 0 {
			firstConfirm = time.Since(killed)
		}
	}
	t.Logf("%s: first confirm %v after the owner stopped (failover timeout %v)", mode, firstConfirm.Round(time.Millisecond), testFailover)
	next := nodes.servedAfter(t, "jobs", epoch)
	// A publish whose confirm was lost is retried with its id: the new
	// owner's rebuilt dedupe window knows it.
	cf, err := pub.Publish(ctx, "jobs", client.Message{ID: "m120", Body: []byte("120")})
	if err != nil || !cf.Duplicate {
		t.Fatalf("republished m120 after the failover: duplicate %v, err %v", cf.Duplicate, err)
	}
	// Every unsettled message, and no acked one, on the new owner.
	again, err := next.dial(t, ctx).Consume(ctx, "jobs", 50)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	seen := map[string]bool{}
	for len(seen) < total+20-acked {
		select {
		case d := <-again.Messages():
			var n int
			fmt.Sscan(string(d.Body), &n)
			if n < acked {
				t.Fatalf("message %d, acked before the failover, delivered again", n)
			}
			if seen[string(d.Body)] {
				t.Fatalf("message %s delivered twice", d.Body)
			}
			seen[string(d.Body)] = true
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d unsettled messages delivered by the new owner %s", len(seen), total+20-acked, next.id)
		}
	}
}

// writtenFrontier is the frontier a mode's copies count.
func writtenFrontier(mode appliance.Durability) frontier {
	if mode == appliance.Buffered {
		return frontier((*wal.Log).WrittenNext)
	}
	return frontier((*wal.Log).DurableNext)
}

// A node whose data directory was wiped holds no copy: it seals as no
// witness, so it never stands in for the records it lost. Durable queue,
// three copies, two needed: while one follower was down, the owner
// confirmed 30 records on itself and the other follower, whose data is
// then wiped. With the owner down too, the two live copies (one behind,
// one empty) are not the E-W+1 = 2 witnesses a recovery needs, and the
// queue waits: installing the one behind would lose confirmed records.
// Once the owner is back, it seals too and the queue recovers with all.
func TestWipedCopyIsNoWitness(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "w", Durability: appliance.Durable}, "replica_durable:2")
	a := nodes.assignments(t, "w")[0]
	behind, wiped := nodes[a.Followers[0]], nodes[a.Followers[1]]
	publishN(t, owner.broker, "w", "before", 10)
	nodes.copiesMatch(t, "w", (*wal.Log).DurableNext)

	behind.close()
	publishN(t, owner.broker, "w", "confirmed", 30) // durable on the owner and wiped
	ol, _ := owner.cluster.OwnerLog("w", 0)
	want := waltest.Records(t, ol, ol.WrittenNext())
	wiped.close()
	wiped.useFS(vfs.NewCrashableMem()) // its queues and copies are gone; its raft log is not
	owner.close()

	behind.restart(t)
	wiped.restart(t)
	await.Within(t, time.Minute, "both live copies to seal", func() bool {
		as := behind.cluster.Node().State().Assignments["w"]
		return len(as) > 0 && as[0].Sealing && len(as[0].Seals) == 2
	})
	as := behind.cluster.Node().State().Assignments["w"]
	mode := behind.cluster.Node().State().Queues["w"].Config.Durability
	if !as[0].Sealing || as[0].Witnesses(mode) != 1 {
		t.Fatalf("recovery with the wiped copy: sealing %v, %d witnesses of %d needed: %+v",
			as[0].Sealing, as[0].Witnesses(mode), as[0].SealsNeeded(), as[0].Seals)
	}

	owner.restart(t)
	next := nodes.servedAfter(t, "w", a.Epoch)
	if next != owner {
		t.Fatalf("%s was installed, not %s, the only witness holding every confirmed record", next.id, owner.id)
	}
	publishN(t, next.broker, "w", "after", 5)
	nodes.copiesHold(t, "w", (*wal.Log).DurableNext, want, "confirmed record %d missing or changed on a copy after the recovery")
}

// The owner's log latches (an fsync fails): it confirms nothing more, the
// queue fails over although the owner's node still answers, and the old
// owner, its log cut back to its last sync as it reopens to seal, follows
// the new owner. Nothing confirmed is lost and the copies end identical.
func TestLatchedOwnerFailsOver(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "l", Durability: appliance.Durable}, "replica_durable:2")
	a := nodes.assignments(t, "l")[0]
	publishN(t, owner.broker, "l", "before", 20)
	// Every copy holds what the owner does before its log latches: a
	// follower still behind when it seals would lose to the owner's
	// longer history, and the owner would rightly be installed again.
	nodes.copiesMatch(t, "l", (*wal.Log).DurableNext)
	ol, _ := owner.cluster.OwnerLog("l", 0)
	want := waltest.Records(t, ol, ol.WrittenNext())

	hit := owner.fault.Arm(owner.cluster.LogDir("l", 0))
	failed := make(chan error, 1)
	owner.broker.PublishAsync("l", appliance.Message{Body: []byte("into the failing sync")},
		func(_ appliance.Confirm, err error) { failed <- err })
	select {
	case <-hit:
	case <-time.After(time.Minute):
		t.Fatal("the injected fsync failure never hit the owner's log")
	}
	if err := <-failed; err == nil {
		t.Fatal("a publish whose fsync failed on the owner was confirmed")
	}
	next := nodes.servedAfter(t, "l", a.Epoch)
	if next == owner {
		t.Fatalf("the latched owner %s was installed again", owner.id)
	}
	publishN(t, next.broker, "l", "after", 10)
	nodes.copiesHold(t, "l", (*wal.Log).DurableNext, want, "confirmed record %d missing or changed on a copy after the recovery")
}

// A follower's copy of a buffered queue latches (its background fsync
// fails) after acknowledging as written records the owner confirmed on
// the two of them (the other follower's disk refused writes): its written
// end falls back to its last sync, below what it acknowledged. Then the
// owner is lost, with no power cut anywhere. The latched copy is no
// witness for what it lost: the recovery does not install on the two
// followers, which lack the confirmed records, but waits for the old
// owner, and nothing confirmed is lost.
func TestLatchedFollowerIsNoWitnessForWhatItLost(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "lf", Durability: appliance.Buffered}, "replica_buffered:2")
	a := nodes.assignments(t, "lf")[0]
	fa, fb := nodes[a.Followers[0]], nodes[a.Followers[1]]
	setInterval := func(ms int) {
		t.Helper()
		s := fa.broker.Settings()
		s.BackgroundSyncIntervalMs = ms
		if err := fa.broker.UpdateSettings(s); err != nil {
			t.Fatal(err)
		}
	}
	publishN(t, owner.broker, "lf", "synced", 10)
	nodes.copiesMatch(t, "lf", (*wal.Log).DurableNext)

	// fb takes nothing more; fa writes what it is pushed and syncs none of it.
	fb.copyFault.Arm(fb.cluster.LogDir("lf", 0))
	setInterval(0)
	publishN(t, owner.broker, "lf", "confirmed", 20)
	ol, _ := owner.cluster.OwnerLog("lf", 0)
	want := waltest.Records(t, ol, ol.WrittenNext())
	l, ok := fa.cluster.Follower().Log("lf", 0)
	if !ok {
		t.Fatalf("%s has no copy", fa.id)
	}
	if w, d := l.WrittenNext(), l.DurableNext(); w < uint64(len(want)) || d >= w {
		t.Fatalf("%s's copy written to %d and durable to %d: want all %d confirmed records written, not all synced",
			fa.id, w, d, len(want))
	}
	fa.copySync.Arm(fa.cluster.LogDir("lf", 0))
	setInterval(10)
	select {
	case <-l.Latched():
	case <-time.After(time.Minute):
		t.Fatalf("%s's copy did not latch on its failing background sync", fa.id)
	}

	owner.close()
	fb.copyFault.Disarm()
	await.Within(t, time.Minute, "both followers to seal, or an owner to be installed", func() bool {
		as := fa.cluster.Node().State().Assignments["lf"]
		return len(as) > 0 && as[0].Epoch > a.Epoch && (!as[0].Sealing || len(as[0].Seals) == 2)
	})
	as := fa.cluster.Node().State().Assignments["lf"][0]
	if !as.Sealing || as.Witnesses(appliance.Buffered) >= as.SealsNeeded() {
		t.Fatalf("recovery without the old owner, the only copy left with every confirmed record: "+
			"sealing %v, %d witnesses of %d needed, owner %s: %+v",
			as.Sealing, as.Witnesses(appliance.Buffered), as.SealsNeeded(), as.Owner, as.Seals)
	}

	// The old owner's broker opens the queue's log again after its
	// cluster has seen the recovery (its start is slow): the recovery
	// must not seal that log under the broker.
	owner.brokerLate = true
	owner.restart(t)
	next := nodes.servedAfter(t, "lf", a.Epoch)
	publishN(t, next.broker, "lf", "after", 5)
	nodes.copiesHold(t, "lf", (*wal.Log).WrittenNext, want, "confirmed record %d missing or changed on a copy after the recovery")
}

// Every node loses its power at once. A durable queue loses nothing it
// confirmed; a buffered one loses only what no copy had synced: every
// record durable on some copy before the cut is in the recovered queue,
// which recovers from the longest surviving history and serves again.
func TestWholeSitePowerCut(t *testing.T) {
	for _, mode := range []appliance.Durability{appliance.Durable, appliance.Buffered} {
		t.Run(mode.String(), func(t *testing.T) {
			nodes := startNodes(t, 3, nodeOptions{})
			policy := "replica_durable:2"
			if mode == appliance.Buffered {
				policy = "replica_buffered:2"
			}
			owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "site", Durability: mode}, policy)
			a := nodes.assignments(t, "site")[0]
			publishN(t, owner.broker, "site", "confirmed", 60)
			nodes.copiesMatch(t, "site", writtenFrontier(mode))
			// What must survive: durable, all 60; buffered, what the copy
			// synced furthest holds.
			ol, _ := owner.cluster.OwnerLog("site", 0)
			survives := ol.DurableNext()
			for _, f := range a.Followers {
				if l, ok := nodes[f].cluster.Follower().Log("site", 0); ok {
					survives = max(survives, l.DurableNext())
				}
			}
			if mode == appliance.Durable && survives < 60 {
				t.Fatalf("durable queue: copies durable to %d of 60 confirmed", survives)
			}
			want := waltest.Records(t, ol, survives)

			nodes.powerCutAll(t, owner.id, a.Followers[0], a.Followers[1])
			next := nodes.servedAfter(t, "site", a.Epoch)
			publishN(t, next.broker, "site", "after", 5)
			nodes.copiesHold(t, "site", writtenFrontier(mode), want, "record %d, synced on a copy before the cut, missing or changed after the recovery")
		})
	}
}

// A whole-site power cut of a buffered queue whose followers had synced
// less than its owner: the followers come back first, shorter, and cut
// (their processes restarted, so they may have lost what they had
// written). Two cut seals are not the E-W+1 a buffered queue needs (a
// confirm's written set may have been the owner and one of them), so the
// recovery waits for every copy, and the owner's longer durable history
// wins once it is back: nothing any copy synced is lost.
func TestWholeSiteCutWaitsForEveryCopy(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "site", Durability: appliance.Buffered}, "replica_buffered:2")
	a := nodes.assignments(t, "site")[0]
	publishN(t, owner.broker, "site", "early", 10)
	nodes.copiesMatch(t, "site", (*wal.Log).DurableNext)
	for _, f := range a.Followers {
		nodes[f].syncs.Shut() // written from here on, never synced
	}
	publishN(t, owner.broker, "site", "owner-synced", 20)
	ol, _ := owner.cluster.OwnerLog("site", 0)
	if err := ol.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := waltest.Records(t, ol, ol.DurableNext())
	ids := []string{owner.id, a.Followers[0], a.Followers[1]}
	var survived []*vfs.MemFS
	for _, id := range ids {
		survived = append(survived, nodes[id].fs.CrashClone(vfs.CrashCloneCfg{}))
	}
	for _, id := range ids {
		nodes[id].syncs.Open() // the held syncs reach the old file system, which is gone
		nodes[id].close()
	}
	for i, id := range ids[1:] {
		nodes[id].useFS(survived[i+1])
		nodes[id].restart(t)
	}
	f := nodes[a.Followers[0]]
	await.Within(t, time.Minute, "both followers to seal", func() bool {
		as := f.cluster.Node().State().Assignments["site"]
		return len(as) > 0 && as[0].Sealing && len(as[0].Seals) == 2
	})
	sealing := f.cluster.Node().State().Assignments["site"][0]
	for _, sl := range sealing.Seals {
		if !sl.Cut || sl.End >= uint64(len(want)) {
			t.Fatalf("a follower back from the power cut sealed %+v: want a cut copy shorter than the owner's %d", sl, len(want))
		}
	}
	if !sealing.Sealing || sealing.Witnesses(appliance.Buffered) != 0 {
		t.Fatalf("installed on two cut copies of a buffered queue: %+v", sealing)
	}
	for _, q := range f.cluster.View().Queues {
		if p := q.Partitions[0]; q.Name == "site" && (!p.Recovering || p.Sealed != 0 || p.SealsNeeded != 2 || p.CutSealed != 2) {
			t.Fatalf("status while waiting for every copy: %+v, want recovering with 0 of 2 counted and 2 cut", p)
		}
	}

	nodes[owner.id].useFS(survived[0])
	nodes[owner.id].restart(t)
	next := nodes.servedAfter(t, "site", a.Epoch)
	if next.id != owner.id {
		t.Fatalf("%s owns the queue, want %s, whose copy synced the most", next.id, owner.id)
	}
	publishN(t, next.broker, "site", "after", 5)
	nodes.copiesHold(t, "site", (*wal.Log).WrittenNext, want, "record %d, synced on the owner before the cut, missing or changed after the recovery")
}

// The followers of a two-partition queue are each ahead on a different
// partition when the owner is lost: A's copy of partition 1 and B's of
// partition 0 stopped taking records (their disks refused writes) while
// the owner confirmed on itself and the other follower. No copy is best
// in both partitions, so the recovery picks one to own the queue, which
// takes the other partition's better tail from the copy holding it and
// seals again; then it is installed, with every confirmed record of both
// partitions.
func TestRecoveryShipsTheBetterTail(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "wide", Durability: appliance.Buffered, Partitions: 2}, "replica_buffered:2")
	as := nodes.assignments(t, "wide")
	fa, fb := nodes[as[0].Followers[0]], nodes[as[0].Followers[1]]
	// A key for each partition.
	keys := map[int]string{}
	for i := 0; len(keys) < 2; i++ {
		k := fmt.Sprint("k", i)
		cf, err := owner.broker.Publish(t.Context(), "wide", appliance.Message{Key: k, Body: []byte("shared " + k)})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := keys[cf.Partition]; !ok {
			keys[cf.Partition] = k
		}
	}
	nodes.copiesMatch(t, "wide", (*wal.Log).WrittenNext)
	fa.copyFault.Arm(fa.cluster.LogDir("wide", 1))
	fb.copyFault.Arm(fb.cluster.LogDir("wide", 0))
	for part, k := range keys {
		for i := range 10 {
			if _, err := owner.broker.Publish(t.Context(), "wide", appliance.Message{Key: k, Body: []byte(fmt.Sprint("confirmed ", part, " ", i))}); err != nil {
				t.Fatalf("publish to partition %d with one follower's copy failing: %v", part, err)
			}
		}
	}
	var want [][]wal.Record
	for part := range 2 {
		ol, _ := owner.cluster.OwnerLog("wide", part)
		want = append(want, waltest.Records(t, ol, ol.WrittenNext()))
	}
	owner.close()
	fa.copyFault.Disarm()
	fb.copyFault.Disarm()
	next := nodes.servedAfter(t, "wide", as[0].Epoch)
	for part := range 2 {
		l, _ := next.cluster.OwnerLog("wide", part)
		have := waltest.Records(t, l, l.WrittenNext())
		for i, w := range want[part] {
			if i >= len(have) || have[i].Offset != w.Offset || !bytes.Equal(have[i].Payload, w.Payload) {
				t.Fatalf("partition %d: confirmed record %d missing or changed on the new owner %s", part, w.Offset, next.id)
			}
		}
	}
	// Every copy, the old owner's too once it is back, ends identical.
	owner.restart(t)
	nodes.copiesMatch(t, "wide", (*wal.Log).WrittenNext)
}

// copiesHold waits for every copy of queue to reach its owner at reach,
// and fails t with msg (a format taking the offset) unless each begins
// with want, record for record.
func (c testCluster) copiesHold(t *testing.T, queue string, reach frontier, want []wal.Record, msg string) {
	t.Helper()
	for _, have := range c.copiesMatch(t, queue, reach) {
		for i, w := range want {
			if i >= len(have) || have[i].Offset != w.Offset || !bytes.Equal(have[i].Payload, w.Payload) {
				t.Fatalf(msg, w.Offset)
			}
		}
	}
}
