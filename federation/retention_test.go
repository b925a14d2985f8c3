package federation

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/internal/waltest"
	"github.com/fibril-edge/fibril/wal"
)

// A follower's copy is cut with its owner's retention: once every message
// is acked and the owner's checkpoint moves its head, the copy drops the
// segments below it too, so a follower's disk use stays bounded like the
// owner's. It never drops what it has not synced itself.
func TestCopiesFollowTheOwnersRetention(t *testing.T) {
	nodes := startNodes(t, 2, nodeOptions{})
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "r", Durability: appliance.Durable}, "replica_durable:2")
	f := nodes.other(owner)
	body := strings.Repeat("x", 1000)
	const n = 3000 // about three of the test's 1 MiB segments
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	publishN(t, owner.broker, "r", body, n)
	ackAll(t, owner.broker, "r", n)
	if err := owner.broker.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	ol, _ := owner.cluster.OwnerLog("r", 0)
	if ol.Head() == 0 {
		t.Fatal("the owner's retention removed nothing")
	}
	publishN(t, owner.broker, "r", "after", 1) // the stream carries the head with its next batch
	l, ok := f.cluster.Follower().Log("r", 0)
	if !ok {
		t.Fatal("no copy")
	}
	end := ol.WrittenNext()
	await.Until(t, ctx, "the copy to sync the owner's last record", func() bool { return l.DurableNext() >= end })
	await.Until(t, ctx, fmt.Sprintf("the copy's head to follow the owner's %d", ol.Head()), func() bool {
		return l.Head() > 0 && l.Head() <= ol.Head() && l.Head() <= l.DurableNext()
	})
}

// publishIDs publishes n messages with ids prefix-i and bodies of size
// bytes, each waiting for its confirm, through b.
func publishIDs(t *testing.T, b *appliance.Broker, queue, prefix string, n, size int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	body := []byte(strings.Repeat("x", size))
	for i := range n {
		if _, err := b.Publish(ctx, queue, appliance.Message{ID: fmt.Sprintf("%s-%d", prefix, i), Body: body}); err != nil {
			t.Fatalf("publish %s-%d: %v", prefix, i, err)
		}
	}
}

// ackAll subscribes to queue on b and acks deliveries until n are acked.
func ackAll(t *testing.T, b *appliance.Broker, queue string, n int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var acked atomic.Int64
	var sub atomic.Pointer[appliance.Subscription]
	subscribed := make(chan struct{}) // deliveries may come before Subscribe returns
	s, err := b.Subscribe(queue, appliance.SubscribeOptions{Prefetch: 500, Deliver: func(d appliance.Delivery) {
		go func() {
			<-subscribed
			if err := sub.Load().Ack(d.Tag); err == nil {
				acked.Add(1)
			}
		}()
	}})
	if err != nil {
		t.Fatal(err)
	}
	sub.Store(s)
	close(subscribed)
	defer s.Close()
	await.Until(t, ctx, fmt.Sprintf("%d messages of %s acked", n, queue), func() bool { return acked.Load() >= n })
}

// A copy that becomes the owner rebuilds the queue from its log alone, so
// on a replicated queue retention keeps the records of the ids the dedupe
// window remembers: after every message was acked and the owner's
// checkpoint ran retention, the owner is lost, and a retry of an early
// id through the new owner is still known as a duplicate.
func TestDedupeWindowSurvivesRetentionAndFailover(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	cfg := appliance.QueueConfig{Name: "dd", Durability: appliance.Durable, DedupeWindow: 10 * time.Minute}
	owner := nodes.declare(t, "n1", cfg, "replica_durable:2")
	epoch := nodes.assignments(t, "dd")[0].Epoch
	const n = 3000 // about three of the test's 1 MiB segments
	publishIDs(t, owner.broker, "dd", "m", n, 1000)
	ackAll(t, owner.broker, "dd", n)
	if err := owner.broker.Checkpoint(t.Context()); err != nil {
		t.Fatal(err)
	}
	ol, _ := owner.cluster.OwnerLog("dd", 0)
	if head := ol.Head(); head != 0 {
		t.Fatalf("retention moved the owner's head to %d past ids its dedupe window remembers", head)
	}
	publishIDs(t, owner.broker, "dd", "late", 1, 10) // the stream carries the head with its next batch
	nodes.copiesMatch(t, "dd", (*wal.Log).DurableNext)

	owner.close()
	delete(nodes, owner.id)
	next := nodes.servedAfter(t, "dd", epoch)
	for _, id := range []string{"m-0", "m-1500", "late-0"} {
		cf, err := next.broker.Publish(t.Context(), "dd", appliance.Message{ID: id, Body: []byte("again")})
		if err != nil || !cf.Duplicate {
			t.Fatalf("retry of %s through the new owner %s: duplicate %v, %v", id, next.id, cf.Duplicate, err)
		}
	}
	cf, err := next.broker.Publish(t.Context(), "dd", appliance.Message{ID: "new", Body: []byte("new")})
	if err != nil || cf.Duplicate {
		t.Fatalf("a new id through the new owner: duplicate %v, %v", cf.Duplicate, err)
	}
}

// A follower that was down while the owner's retention passed the end of
// its copy (past the hold, its owner stops keeping records for it) is
// rebuilt from the owner's head when it returns: it holds the owner's
// records from the head on, and the owner's gate counts it again.
func TestCopyBehindTheOwnersHeadIsRebuilt(t *testing.T) {
	const hold = 200 * time.Millisecond
	nodes := startNodes(t, 3, nodeOptions{followerHold: hold})
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "far", Durability: appliance.Durable}, "replica_durable:2")
	a := nodes.assignments(t, "far")[0]
	lagging := nodes[a.Followers[1]]
	publishIDs(t, owner.broker, "far", "before", 10, 10)
	nodes.copiesMatch(t, "far", (*wal.Log).DurableNext)

	lagging.close()
	const n = 3000 // about three of the test's 1 MiB segments
	publishIDs(t, owner.broker, "far", "m", n, 1000)
	ackAll(t, owner.broker, "far", n+10)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ol, _ := owner.cluster.OwnerLog("far", 0)
	await.Until(t, ctx, fmt.Sprintf("the owner's retention to pass %s's copy once the hold is over", lagging.id), func() bool {
		if err := owner.broker.Checkpoint(ctx); err != nil {
			t.Fatal(err)
		}
		return ol.Head() > 10
	})
	head := ol.Head()

	lagging.restart(t)
	publishIDs(t, owner.broker, "far", "after", 5, 10)
	end := ol.WrittenNext()
	var l *wal.Log
	await.Until(t, ctx, fmt.Sprintf("%s's copy to be rebuilt from the head %d up to %d", lagging.id, head, end), func() bool {
		cl, ok := lagging.cluster.Follower().Log("far", 0)
		l = cl
		return ok && cl.Head() >= head && cl.DurableNext() >= end
	})
	from := end - 5 // the unsettled tail: the owner's retention may still move its head up to it
	want, have := waltest.Range(t, ol, from, end), waltest.Range(t, l, from, end)
	for i := range want {
		if want[i].Offset != have[i].Offset || !bytes.Equal(want[i].Payload, have[i].Payload) {
			t.Fatalf("record %d differs on the rebuilt copy", want[i].Offset)
		}
	}
	g, _ := owner.cluster.Gate("far", 0)
	await.Until(t, ctx, fmt.Sprintf("the owner's gate to count %s", lagging.id), func() bool {
		p, ok := g.Positions()[lagging.id]
		return ok && p.Durable >= end
	})
}
