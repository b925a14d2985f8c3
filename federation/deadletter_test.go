package federation

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/wal"
)

// A cluster queue's dead-letter queue is a cluster queue on the same
// owner: a rejected message is copied into it through its gate, so the
// copy is replicated (every follower's copy equals the owner's log) and
// can be consumed through any node.
func TestDeadLetterReplicated(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{clients: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "orders", Durability: appliance.Durable, DeadLetter: "rejects"}, "")
	if dl := nodes.assignments(t, "rejects"); dl[0].Owner != owner.id {
		t.Fatalf("rejects owned by %s, orders by %s", dl[0].Owner, owner.id)
	}
	await.Within(t, 30*time.Second, owner.id+" to serve rejects", func() bool {
		_, ok := owner.cluster.Gate("rejects", 0)
		return ok
	})
	const n = 50
	publishN(t, owner.broker, "orders", "order", n)
	rejected := make(chan uint64, n)
	sub, err := owner.broker.Subscribe("orders", appliance.SubscribeOptions{Prefetch: n, Deliver: func(d appliance.Delivery) {
		rejected <- d.Tag
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for range n {
		select {
		case tag := <-rejected:
			if err := sub.Nack(false, tag); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("orders delivered too few messages")
		}
	}
	await.Within(t, 30*time.Second, "every rejected message in rejects", func() bool {
		info, err := owner.broker.QueueInfo("rejects")
		return err == nil && info.Messages == n
	})
	nodes.copiesMatch(t, "rejects", (*wal.Log).DurableNext)

	through := nodes.other(owner)
	cons, err := through.dial(t, ctx).Consume(ctx, "rejects", n)
	if err != nil {
		t.Fatalf("consume rejects through %s: %v", through.id, err)
	}
	defer cons.Close()
	seen := map[string]bool{}
	for len(seen) < n {
		select {
		case d := <-cons.Messages():
			if reason, _ := d.Header("fibril-dead-letter-reason"); reason != "rejected" || !strings.HasPrefix(string(d.Body), "order-") {
				t.Fatalf("dead letter %q with reason %q", d.Body, reason)
			}
			seen[string(d.Body)] = true
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d dead letters consumed through %s", len(seen), n, through.id)
		}
	}
}

// A queue and its dead-letter queue on different nodes, as a failover of
// one of them can leave them (each recovers on its own): the queue's
// owner copies a rejected message into the dead-letter queue through the
// cluster, to the node that serves it now, and the copy is replicated
// there; nothing is left in a queue of the owner's own that the cluster
// does not know. Here the dead-letter queue alone goes through a recovery,
// which installs a follower (the old owner comes last).
func TestDeadLetterServedElsewhere(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{clients: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "orders", Durability: appliance.Durable, DeadLetter: "rejects"}, "")
	await.Within(t, 30*time.Second, owner.id+" to serve rejects", func() bool {
		_, ok := owner.cluster.Gate("rejects", 0)
		return ok
	})
	const n = 10
	publishN(t, owner.broker, "orders", "order", n)
	nodes.copiesMatch(t, "rejects", (*wal.Log).DurableNext) // every copy a witness
	a := nodes.assignments(t, "rejects")[0]
	epoch := a.Epoch
	owner.cluster.proposeRecovery("rejects", a.Incarnation, epoch, "test: move the dead-letter queue alone")
	dlOwner := nodes.servedAfter(t, "rejects", epoch)
	if dlOwner == owner {
		t.Fatalf("rejects recovered on %s, the owner of orders: the test needs them apart", owner.id)
	}

	rejected := make(chan uint64, n)
	sub, err := owner.broker.Subscribe("orders", appliance.SubscribeOptions{Prefetch: n, Deliver: func(d appliance.Delivery) {
		rejected <- d.Tag
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for range n {
		select {
		case tag := <-rejected:
			if err := sub.Nack(false, tag); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("orders delivered too few messages")
		}
	}
	await.Within(t, 30*time.Second, "every rejected message in rejects on "+dlOwner.id, func() bool {
		info, err := dlOwner.broker.QueueInfo("rejects")
		return err == nil && info.Messages == n
	})
	nodes.copiesMatch(t, "rejects", (*wal.Log).DurableNext)
	if _, err := owner.broker.QueueInfo("rejects"); err == nil {
		t.Fatalf("%s serves a rejects of its own; the cluster places rejects on %s", owner.id, dlOwner.id)
	}
	await.Within(t, 30*time.Second, "orders to settle every rejected message", func() bool {
		info, err := owner.broker.QueueInfo("orders")
		return err == nil && info.Messages == 0 && info.Counters.DeadLettered == n
	})
}
