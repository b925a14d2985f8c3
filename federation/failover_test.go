package federation

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/client"
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
		t.Run(string(tc.mode), func(t *testing.T) { ownerLossFailsOver(t, tc.mode, tc.policy) })
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
