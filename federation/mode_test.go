package federation

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/federation/control"
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

// setModeInEffect asks through via for queue's mode to change to d and
// waits until via's control state has the change in effect. SetMode
// itself answers pending after modeWait; on a loaded machine the owner's
// syncs can take longer than that, which is not a failure here.
func setModeInEffect(t *testing.T, via *clusterNode, queue string, d appliance.Durability) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	q, pending, err := via.cluster.SetMode(ctx, queue, d)
	if err != nil {
		t.Fatalf("SetMode of %s to %s through %s: %v", queue, d, via.id, err)
	}
	if !pending {
		if q.Config.Durability != d {
			t.Fatalf("SetMode of %s to %s through %s answered in effect with %s", queue, d, via.id, q.Config.Durability)
		}
		return
	}
	inEffect := func(s *control.State) bool {
		q := s.Queues[queue]
		return q.Config.Durability == d && q.ModeChange == nil
	}
	if err := via.cluster.Node().waitFor(ctx, inEffect); err != nil {
		q := via.cluster.Node().State().Queues[queue]
		t.Fatalf("the change of %s to %s never took effect: %s with change %+v: %v", queue, d, q.Config.Durability, q.ModeChange, err)
	}
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
	setModeInEffect(t, via, "mc", appliance.Durable)
	// In effect once the policy's count of copies (the owner's and one
	// follower's) holds the records before the fence durable; the other
	// follower syncs them too, in its own time.
	durable := 0
	for _, f := range a.Followers {
		if l, _ := nodes[f].cluster.Follower().Log("mc", 0); l.DurableNext() >= 20 {
			durable++
		}
	}
	if durable == 0 {
		t.Fatalf("no follower's copy is durable past the 20 records before the change when it took effect")
	}
	for _, f := range a.Followers {
		l, _ := nodes[f].cluster.Follower().Log("mc", 0)
		await.Within(t, time.Minute, f+"'s copy to sync the records before the change", func() bool { return l.DurableNext() >= 20 })
	}
	wantModes(t, publishConfirms(t, owner.broker, "mc", "after", 30), appliance.Durable, "after the change")
	for _, n := range nodes {
		await.Within(t, time.Minute, n.id+"'s control state to have durable in effect", func() bool {
			got := n.cluster.Node().State().Queues["mc"]
			return got.Config.Durability == appliance.Durable && got.ModeChange == nil
		})
	}

	ol, _ := owner.cluster.OwnerLog("mc", 0)
	want := waltest.Records(t, ol, ol.WrittenNext())
	nodes.powerCutAll(t, owner.id, a.Followers[0], a.Followers[1])
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
	// Both copies hold the ten synced, so each is a witness for them in
	// the recovery below (a copy still being created when its syncs shut
	// would be none, and the recovery would wait for the old owner).
	nodes.copiesMatch(t, "move", (*wal.Log).DurableNext)
	for _, f := range a.Followers {
		nodes[f].syncs.Shut()
	}
	publishConfirms(t, owner.broker, "move", "unsynced", 5) // written on the copies, synced on none
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
	setModeInEffect(t, owner, "down", appliance.Buffered)
	await.Within(t, time.Minute, "the owner's broker to follow", func() bool {
		in, err := owner.broker.QueueInfo("down")
		return err == nil && in.Config.Durability == appliance.Buffered
	})
	wantModes(t, publishConfirms(t, owner.broker, "down", "after", 10), appliance.Buffered, "after the change")
	if _, _, err := owner.cluster.SetMode(t.Context(), "down", appliance.Buffered); err != nil {
		t.Fatalf("asking again for the mode in effect: %v", err)
	}
}

// Both directions under load on three nodes, each followed by a power cut
// of every node at once: each confirm states a mode, the log splits at one
// offset into the old mode's confirms and the new one's, and after the
// cut every confirm that stated durable is there, byte for byte (a
// buffered one may be gone: no copy syncs in the background here).
func TestModeChangeUnderLoadThenWholeSiteCut(t *testing.T) {
	for _, dir := range []struct{ from, to appliance.Durability }{
		{appliance.Buffered, appliance.Durable}, {appliance.Durable, appliance.Buffered},
	} {
		t.Run(dir.to.String(), func(t *testing.T) {
			nodes := startNodes(t, 3, nodeOptions{})
			policy := map[appliance.Durability]string{appliance.Buffered: "replica_buffered:2", appliance.Durable: "replica_durable:2"}[dir.from]
			owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "load", Durability: dir.from}, policy)
			a := nodes.assignments(t, "load")[0]
			for _, n := range nodes {
				s := n.broker.Settings()
				s.BackgroundSyncIntervalMs = 0 // what a buffered confirm left unsynced stays so
				if err := n.broker.UpdateSettings(s); err != nil {
					t.Fatal(err)
				}
			}
			type confirmed struct {
				cf   appliance.Confirm
				body string
			}
			stop := make(chan struct{})
			var stopOnce sync.Once
			done := make(chan []confirmed, 1)
			finished := make(chan struct{})
			changed := make(chan struct{})
			// A failure below must end the publisher before the nodes
			// close under it (cleanups run last registered first).
			t.Cleanup(func() { stopOnce.Do(func() { close(stop) }); <-finished })
			go func() { // one publisher, back to back, through the change and after it
				defer close(finished)
				var out []confirmed
				after := 0
				for i := 0; ; i++ {
					select {
					case <-stop:
						done <- out
						return
					default:
					}
					body := fmt.Sprintf("load-%06d", i)
					cf, err := owner.broker.Publish(context.Background(), "load", appliance.Message{Body: []byte(body)})
					if err != nil {
						continue // not confirmed: no promise to check
					}
					out = append(out, confirmed{cf, body})
					select {
					case <-changed:
						if after++; after == 50 {
							stopOnce.Do(func() { close(stop) })
						}
					default:
					}
				}
			}()
			setModeInEffect(t, nodes[a.Followers[1]], "load", dir.to)
			close(changed)
			got := <-done

			split := -1 // the first confirm in the new mode
			for i, c := range got {
				switch {
				case c.cf.Durability == dir.to && split < 0:
					split = i
				case c.cf.Durability != dir.to && split >= 0:
					t.Fatalf("confirm %d (offset %d) states %s after one stated %s", i, c.cf.Offset, c.cf.Durability, dir.to)
				}
			}
			if split <= 0 {
				t.Fatalf("no confirm on both sides of the change (split at %d of %d)", split, len(got))
			}

			nodes.powerCutAll(t, owner.id, a.Followers[0], a.Followers[1])
			next := nodes.servedAfter(t, "load", a.Epoch)
			ol, _ := next.cluster.OwnerLog("load", 0)
			recs := waltest.Records(t, ol, ol.WrittenNext())
			if len(recs) == 0 {
				t.Fatal("the recovered queue holds nothing")
			}
			lost := 0
			for _, c := range got {
				i := int(c.cf.Offset - recs[0].Offset)
				held := i >= 0 && i < len(recs) && strings.Contains(string(recs[i].Payload), c.body)
				if !held && c.cf.Durability == appliance.Durable {
					t.Fatalf("offset %d (%s) was confirmed durable and is gone after the cut", c.cf.Offset, c.body)
				}
				if !held {
					lost++
				}
			}
			t.Logf("%d confirms, %d in the new mode from offset %d; %d buffered ones lost to the cut",
				len(got), len(got)-split, got[split].cf.Offset, lost)
		})
	}
}

// A node that forwards a proposal answers from its own state once it has
// applied the proposal: a mode change asked through a follower right
// after the leader committed the declaration finds the queue, and the
// settings and deletes it forwards are what it reads next.
func TestProposalsThroughAFollowerReadTheirWrites(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	leaderID, _ := nodes["n1"].cluster.Node().Leader()
	leader := nodes[leaderID]
	follower := nodes.other(leader)
	for i := range 20 {
		name := fmt.Sprintf("q%02d", i)
		if _, _, err := leader.cluster.DeclarePolicy(ctx, appliance.QueueConfig{Name: name, Partitions: 1}, "replica_durable:2"); err != nil {
			t.Fatalf("declare %s through the leader: %v", name, err)
		}
		q, pending, err := follower.cluster.SetMode(ctx, name, appliance.Durable) // the mode it has
		if err != nil {
			t.Fatalf("SetMode of %s through %s right after its declaration: %v", name, follower.id, err)
		}
		if pending || q.Config.Durability != appliance.Durable {
			t.Fatalf("SetMode of %s to the mode it has answered %s, pending %v", name, q.Config.Durability, pending)
		}
	}
	if err := follower.cluster.Node().SetSettings(ctx, map[string]string{"default_policy": "replica_buffered:2"}); err != nil {
		t.Fatalf("set the cluster default through %s: %v", follower.id, err)
	}
	if err := follower.cluster.Node().DeleteQueue(ctx, "q00"); err != nil {
		t.Fatalf("delete q00 through %s: %v", follower.id, err)
	}
	st := follower.cluster.Node().State()
	if _, ok := st.Queues["q00"]; ok {
		t.Fatalf("%s still holds q00 after deleting it", follower.id)
	}
	if got := st.Settings["default_policy"]; got != "replica_buffered:2" {
		t.Fatalf("%s reads default_policy %q after setting it", follower.id, got)
	}
}

// A durable publish in flight (appended under the durable rule, waiting
// for the followers' syncs) when the queue changes to buffered keeps its
// durable promise: its confirm says durable, so it comes only once the
// policy's count of copies holds it durable, not once they have written
// it.
func TestModeChangeToBufferedKeepsAnInFlightDurablePromise(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "inflight", Durability: appliance.Durable}, "")
	a := nodes.assignments(t, "inflight")[0]
	publishConfirms(t, owner.broker, "inflight", "before", 10)
	nodes.copiesMatch(t, "inflight", (*wal.Log).DurableNext)
	for _, f := range a.Followers {
		nodes[f].syncs.Shut()
	}
	t.Cleanup(func() {
		for _, f := range a.Followers {
			nodes[f].syncs.Open()
		}
	})
	durableCopies := func(offset uint64) int {
		n := 0
		for _, f := range a.Followers {
			if l, ok := nodes[f].cluster.Follower().Log("inflight", 0); ok && l.DurableNext() > offset {
				n++
			}
		}
		return n
	}
	type outcome struct {
		c      appliance.Confirm
		err    error
		copies int // followers holding it durable when the confirm came
	}
	confirmed := make(chan outcome, 1)
	owner.broker.PublishAsync("inflight", appliance.Message{Body: []byte("in flight")}, func(c appliance.Confirm, err error) {
		confirmed <- outcome{c, err, durableCopies(c.Offset)}
	})
	for _, f := range a.Followers {
		l, _ := nodes[f].cluster.Follower().Log("inflight", 0)
		await.Within(t, time.Minute, f+" to write the publish", func() bool { return l.WrittenNext() >= 11 })
	}
	setModeInEffect(t, owner, "inflight", appliance.Buffered)
	// Counting written copies, the change itself would release the
	// confirm at once (the gate wakes its waiters); give that a moment to
	// show before the syncs are let go. Nothing waits on this window: a
	// confirm that comes later is checked the same way below.
	var o outcome
	select {
	case o = <-confirmed:
	case <-time.After(time.Second):
		for _, f := range a.Followers {
			nodes[f].syncs.Open()
		}
		select {
		case o = <-confirmed:
		case <-time.After(time.Minute):
			t.Fatal("the in-flight publish was never confirmed once the followers could sync")
		}
	}
	if o.err != nil {
		t.Fatalf("the in-flight publish failed: %v", o.err)
	}
	if o.c.Durability != appliance.Durable || o.copies < 1 {
		t.Fatalf("offset %d confirmed as %s with %d of %d followers holding it durable (policy %s: the owner and one more)",
			o.c.Offset, o.c.Durability, o.copies, len(a.Followers), a.Policy)
	}
}
