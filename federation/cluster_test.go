package federation

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/wal"
)

// Issue tests 1 and 3: both modes, 20,000 messages published and
// consumed; no delivery is ever above its partition's ceiling; every
// follower's log equals the owner's prefix record for record.
func TestClusterReplicatesBothModes(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	const perQueue = 10000
	for _, q := range []struct {
		cfg    appliance.QueueConfig
		policy string
	}{
		{appliance.QueueConfig{Name: "durable-q", Durability: appliance.Durable, Partitions: 2}, "majority_durable"},
		{appliance.QueueConfig{Name: "buffered-q", Durability: appliance.Buffered, Partitions: 2}, ""},
	} {
		t.Run(q.cfg.Name, func(t *testing.T) {
			owner := nodes.declare(t, "n2", q.cfg, q.policy)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var got atomic.Int64
			var above atomic.Value
			var sub *appliance.Subscription
			sub, err := owner.broker.Subscribe(q.cfg.Name, appliance.SubscribeOptions{Prefetch: 500, Deliver: func(d appliance.Delivery) {
				if g, _ := owner.cluster.Gate(d.Queue, d.Partition); d.Offset >= g.Ceiling() {
					above.Store(fmt.Sprintf("offset %d delivered at ceiling %d", d.Offset, g.Ceiling()))
				}
				got.Add(1)
				go sub.Ack(d.Tag)
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			publishN(t, owner.broker, q.cfg.Name, q.cfg.Name, perQueue)
			await.Until(t, ctx, "every message delivered", func() bool { return got.Load() >= perQueue })
			if v := above.Load(); v != nil {
				t.Fatal(v)
			}
			for _, have := range nodes.copiesMatch(t, q.cfg.Name, (*wal.Log).WrittenNext) {
				if len(have) == 0 {
					t.Fatalf("a copy of %s is empty", q.cfg.Name)
				}
			}
		})
	}
}

// Issue test 2: with the followers' syncs held, a buffered queue confirms
// (written on 2 of 3) while a durable one waits until they sync; with too
// few followers for the policy, a publish waits and times out with an
// error that names the missing copies.
func TestConfirmGateBoundary(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	buf := nodes.declare(t, "n1", appliance.QueueConfig{Name: "b"}, "replica_buffered:3")
	dur := nodes.declare(t, "n1", appliance.QueueConfig{Name: "d"}, "replica_durable:3")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Warm both streams so the holds below catch only the publishes.
	for _, q := range []struct {
		n    *clusterNode
		name string
	}{{buf, "b"}, {dur, "d"}} {
		if _, err := q.n.broker.Publish(ctx, q.name, appliance.Message{Body: []byte("warm")}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		n.syncs.Shut()
	}
	if _, err := buf.broker.Publish(ctx, "b", appliance.Message{Body: []byte("fast")}); err != nil {
		t.Fatalf("buffered publish with syncs held: %v", err)
	}
	g, _ := buf.cluster.Gate("b", 0)
	for f, p := range g.Positions() {
		if p.Durable >= 2 {
			t.Fatalf("follower %s reports durable %d while its syncs are held", f, p.Durable)
		}
	}
	confirmed := make(chan error, 1)
	dur.broker.PublishAsync("d", appliance.Message{Body: []byte("slow")}, func(_ appliance.Confirm, err error) { confirmed <- err })
	dg, _ := dur.cluster.Gate("d", 0)
	// Both followers have written it ...
	await.Until(t, ctx, "followers to write the durable publish", func() bool {
		for _, p := range dg.Positions() {
			if p.Written < 2 {
				return false
			}
		}
		return true
	})
	// ... yet it is not confirmed, because neither has synced it.
	confirmOnRelease(t, ctx, confirmed, slices.Collect(maps.Values(nodes))...)
	// Too few followers: stop one follower's store; replica_durable:3 waits.
	var follower string
	for _, f := range dur.cluster.Node().State().Assignments["d"][0].Followers {
		follower = f
	}
	nodes[follower].cluster.Follower().Close()
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	_, err := dur.broker.Publish(short, "d", appliance.Message{Body: []byte("stuck")})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "the policy needs 3") {
		t.Fatalf("publish with a follower down: %v, want a timeout naming the copies", err)
	}
}
