package federation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/internal/await"
)

// A consumer may connect to any node: a node that does not own the queue
// consumes it on the owner and passes deliveries and settles through, with
// when the owner took each publish.
// What the proxied consumer leaves unsettled when it closes is ready again
// on the owner, released without counting a delivery (as a local
// subscription's close releases it).
func TestConsumeThroughAnyNode(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{clients: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "jobs", Partitions: 2}, "")
	through := nodes.other(owner)
	cl := through.dial(t, ctx)
	const total, kept = 300, 20
	before := time.Now()
	for i := range total {
		if _, err := cl.Publish(ctx, "jobs", client.Message{Key: fmt.Sprint(i % 4), Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatalf("publish %d through %s (owner %s): %v", i, through.id, owner.id, err)
		}
	}
	cons, err := cl.Consume(ctx, "jobs", 50)
	if err != nil {
		t.Fatalf("consume through %s (owner %s): %v", through.id, owner.id, err)
	}
	if cons.Partitions() != 2 {
		t.Fatalf("subscribed to %d partitions through the proxy, want 2", cons.Partitions())
	}
	seen := map[string]bool{}
	var unacked []string
	for len(seen) < total {
		select {
		case d := <-cons.Messages():
			body := string(d.Body)
			if seen[body] {
				t.Fatalf("%s delivered twice", body)
			}
			seen[body] = true
			if d.PublishedAt.Before(before) || d.PublishedAt.After(time.Now()) {
				t.Fatalf("%s published at %v through the proxy, want after %v", body, d.PublishedAt, before)
			}
			if len(seen) > total-kept {
				unacked = append(unacked, body) // left unsettled
				continue
			}
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d delivered through %s", len(seen), total, owner.id)
		}
	}
	// Every ack went through to the owner: only the unsettled remain.
	waitMessages := func(want int64) {
		t.Helper()
		await.Within(t, 30*time.Second, fmt.Sprintf("%d messages on the owner", want), func() bool {
			info, err := owner.broker.QueueInfo("jobs")
			return err == nil && info.Messages == want
		})
	}
	waitMessages(kept)
	cons.Close()
	// Closing the proxied consumer released its unsettled deliveries on the
	// owner: a consumer there gets exactly those.
	again, err := owner.dial(t, ctx).Consume(ctx, "jobs", 50)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	back := map[string]bool{}
	for len(back) < kept {
		select {
		case d := <-again.Messages():
			if d.Deliveries != 1 {
				t.Fatalf("%s came back as delivery %d: a close counted it", d.Body, d.Deliveries)
			}
			back[string(d.Body)] = true
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d released deliveries came back", len(back), kept)
		}
	}
	for _, b := range unacked {
		if !back[b] {
			t.Fatalf("%s was left unsettled but did not come back (got %v)", b, back)
		}
	}
	waitMessages(0)
}

// A proxied subscription is paused by the delivery budget like a local
// one: while paused the owner's deliveries are held back from the local
// connection, and they go on, in order, once it resumes; closing a paused
// proxy lets its held handlers go without delivering.
func TestProxyConsumerPauses(t *testing.T) {
	delivered := make(chan string, 4)
	p := &proxyConsumer{c: &Cluster{proxies: map[*proxyConsumer]struct{}{}}, deliver: func(d appliance.Delivery) { delivered <- string(d.Body) },
		held: map[uint64]*client.Delivery{}, log: slog.New(slog.DiscardHandler)}
	p.Pause()
	handled := make(chan struct{})
	go func() {
		defer close(handled)
		for _, b := range []string{"one", "two"} {
			if err := p.handle(context.Background(), &client.Delivery{Body: []byte(b)}); err != nil {
				t.Error(err)
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	await.Until(t, ctx, "the handler to be held by the pause", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.waiting == 1
	})
	if len(delivered) != 0 {
		t.Fatal("a paused proxy delivered")
	}
	p.Resume()
	for _, want := range []string{"one", "two"} {
		select {
		case got := <-delivered:
			if got != want {
				t.Fatalf("delivered %q, want %q", got, want)
			}
		case <-ctx.Done():
			t.Fatal("a resumed proxy did not deliver")
		}
	}
	<-handled

	p.Pause()
	held := make(chan struct{})
	go func() { defer close(held); _ = p.handle(context.Background(), &client.Delivery{Body: []byte("late")}) }()
	await.Until(t, ctx, "the handler to be held", func() bool { p.mu.Lock(); defer p.mu.Unlock(); return p.waiting == 1 })
	p.Close()
	<-held
	if len(delivered) != 0 {
		t.Fatal("a closed proxy delivered what it held")
	}
}

// A consumer follows its queue when the queue fails over: one consuming
// through a node that does not own the queue (a proxy to the owner) and
// one on a node that owned it are told the subscription ended and
// subscribe again by themselves, so both go on receiving from the new
// owner without reconnecting; nothing unsettled is lost.
func TestConsumersFollowAFailover(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{clients: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "jobs", Durability: appliance.Durable}, "")
	epoch := nodes.assignments(t, "jobs")[0].Epoch
	var via *clusterNode // not the owner; stays up
	for _, n := range nodes {
		if n != owner && (via == nil || n.id < via.id) {
			via = n
		}
	}
	cl := via.dial(t, ctx)
	cons, err := cl.Consume(ctx, "jobs", 10)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	seen := map[string]bool{}
	receive := func(want int, when string) {
		t.Helper()
		for len(seen) < want {
			select {
			case d := <-cons.Messages():
				seen[string(d.Body)] = true
				if err := d.Ack(); err != nil && !errors.Is(err, client.ErrStaleDelivery) {
					t.Fatalf("ack %s: %v", d.Body, err)
				}
			case <-cons.Done():
				t.Fatalf("%s: the consumer ended: %v", when, cons.Err())
			case <-ctx.Done():
				t.Fatalf("%s: %d of %d messages received through %s", when, len(seen), want, via.id)
			}
		}
	}
	for i := range 20 {
		if _, err := cl.Publish(ctx, "jobs", client.Message{Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	receive(20, "before the failover")

	owner.close()
	delete(nodes, owner.id)
	next := nodes.servedAfter(t, "jobs", epoch)
	for i := 20; i < 40; i++ {
		for {
			if _, err := cl.Publish(ctx, "jobs", client.Message{ID: fmt.Sprint(i), Body: []byte(fmt.Sprint(i))}); err == nil {
				break
			} else if ctx.Err() != nil {
				t.Fatalf("publish %d after the owner's loss: %v", i, err)
			}
		}
	}
	receive(40, "after the failover to "+next.id)

	// A deleted queue's end reaches its consumers, on the owner and
	// through a proxy, as ErrNotFound, not as silence.
	direct, err := next.dial(t, ctx).Consume(ctx, "jobs", 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := next.cluster.DeleteQueue(ctx, "jobs"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*client.Consumer{direct, cons} {
		select {
		case <-c.Done():
			if !errors.Is(c.Err(), client.ErrNotFound) {
				t.Fatalf("consumer ended with %v after the delete, want not found", c.Err())
			}
		case <-ctx.Done():
			t.Fatal("a consumer of a deleted queue did not end")
		}
	}
}

// Through a proxy, InProgress keeps a slow consumer's message past the
// owner's ack deadline, and NackDelay requeues on the owner after the
// delay, not before, while the consumer's window reopens at once.
func TestProxyConsumerExtendsAndDelays(t *testing.T) {
	const ackDeadline, delay = 300 * time.Millisecond, 500 * time.Millisecond
	nodes := startNodes(t, 3, nodeOptions{clients: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "slow", AckDeadline: ackDeadline}, "")
	cl := nodes.other(owner).dial(t, ctx)
	for i := range 3 {
		if _, err := cl.Publish(ctx, "slow", client.Message{Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := cl.Consume(ctx, "slow", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	next := func(want string, deliveries int) *client.Delivery {
		t.Helper()
		select {
		case d := <-cons.Messages():
			if string(d.Body) != want || d.Deliveries != deliveries {
				t.Fatalf("delivered %q (delivery %d), want %q (delivery %d)", d.Body, d.Deliveries, want, deliveries)
			}
			return d
		case <-ctx.Done():
			t.Fatalf("no delivery of %q", want)
			return nil
		}
	}
	d := next("0", 1)
	start := time.Now()
	for range 4 {
		time.Sleep(ackDeadline / 2) // the handler's work, not a wait for an event
		if err := d.InProgress(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(ackDeadline / 2)
	if held := time.Since(start); held <= ackDeadline {
		t.Fatalf("held only %v", held)
	}
	if err := d.Ack(); err != nil {
		t.Fatal(err)
	}
	d = next("1", 1)
	nackedAt := time.Now()
	if err := d.NackDelay(delay); err != nil {
		t.Fatal(err)
	}
	if err := next("2", 1).Ack(); err != nil { // the window reopened at once
		t.Fatal(err)
	}
	d = next("1", 2)
	if waited := time.Since(nackedAt); waited < delay {
		t.Fatalf("redelivered after %v, before the delay of %v", waited, delay)
	}
	if err := d.Ack(); err != nil {
		t.Fatal(err)
	}
	await.Within(t, 30*time.Second, "the owner's queue empty", func() bool {
		info, err := owner.broker.QueueInfo("slow")
		return err == nil && info.Messages == 0
	})
	info, err := owner.broker.QueueInfo("slow")
	if err != nil {
		t.Fatal(err)
	}
	if info.Counters.Expired != 0 || info.Counters.Requeued != 1 {
		t.Fatalf("on the owner: %d expired, %d requeued; want 0 and 1", info.Counters.Expired, info.Counters.Requeued)
	}
}
