package federation

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/internal/await"
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
	var acked atomic.Int64
	var sub *appliance.Subscription
	sub, err := owner.broker.Subscribe("r", appliance.SubscribeOptions{Prefetch: 500, Deliver: func(d appliance.Delivery) {
		go func() {
			if err := sub.Ack(d.Tag); err == nil {
				acked.Add(1)
			}
		}()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	publishN(t, owner.broker, "r", body, n)
	await.Until(t, ctx, "every message acked", func() bool { return acked.Load() >= n })
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
