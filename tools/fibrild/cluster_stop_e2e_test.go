package main

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/admin"
	"github.com/fibril-edge/fibril/appliance/client"
)

// A queue's owner is paused (SIGSTOP) beyond the failover timeout: the
// other two nodes move the queue, and the old owner is resumed (SIGCONT)
// and stays up, a non-owner now. Its consumers must follow the queue: one
// subscribed directly on the old owner (its broker closes the queue and
// ends the subscription, so the client subscribes again and is proxied to
// the new owner), and one through each follower (a proxy to the old owner
// ends once the control state names the new owner: on the new owner the
// client subscribes again locally, on the third node through a proxy to
// the new owner). Everything published afterwards through the two other
// nodes is consumed and acked by the three together; then each consumer,
// the others held back, must be served on its own, not hang.
func TestClusterConsumersFollowStoppedOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three fibrild processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cp := startClusterProcs(t, ctx)
	var v admin.ClusterView
	if _, err := cp.dial(t, ctx, "n1").DeclareQueue(ctx, client.Queue("jobs").Durable()); err != nil {
		t.Fatal(err)
	}
	waitView(t, ctx, cp.procs["n1"].Admin, &v, func() bool {
		return len(v.Queues) == 1 && v.Queues[0].Partitions[0].Owner != "" && !v.Queues[0].Partitions[0].Recovering
	})
	part := v.Queues[0].Partitions[0]
	oldOwner, watcher := part.Owner, part.Followers[0]
	t.Logf("owner %s, followers %v", oldOwner, part.Followers)

	// One consumer per node, subscribed before the owner is paused, each
	// read into a channel of its own so that it can be held back.
	const prefetch = 20
	type got struct {
		who string
		d   *client.Delivery
	}
	consumers := map[string]*client.Consumer{}
	channels := map[string]chan got{}
	for _, id := range cp.ids {
		who := "proxied through " + id
		if id == oldOwner {
			who = "direct on " + id
		}
		cons, err := cp.dial(t, ctx, id).Consume(ctx, "jobs", prefetch)
		if err != nil {
			t.Fatalf("consume through %s: %v", id, err)
		}
		ch := make(chan got)
		go func() {
			for d := range cons.Messages() {
				select {
				case ch <- got{who, d}:
				case <-ctx.Done():
					return
				}
			}
		}()
		consumers[id], channels[id] = cons, ch
	}

	if err := syscall.Kill(cp.procs[oldOwner].Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := syscall.Kill(cp.procs[oldOwner].Pid(), syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT %s: %v", oldOwner, err)
			}
		}
	}
	defer resume() // on a failure too, before the cleanups stop the processes
	waitView(t, ctx, cp.procs[watcher].Admin, &v, func() bool {
		if len(v.Queues) != 1 {
			return false
		}
		p := v.Queues[0].Partitions[0]
		return p.Owner != "" && p.Owner != oldOwner && !p.Recovering
	})
	newOwner := v.Queues[0].Partitions[0].Owner
	t.Logf("the queue moved to %s; resuming %s", newOwner, oldOwner)
	resume()

	// Publish through the two nodes other than the old owner.
	var pubs []*client.Client
	for _, id := range cp.ids {
		if id != oldOwner {
			pubs = append(pubs, cp.dial(t, ctx, id))
		}
	}
	published := map[string]bool{}
	publish := func(phase string, n int) map[string]bool {
		t.Helper()
		want := map[string]bool{}
		futures := make([]*client.Future, n)
		for i := range futures {
			body := fmt.Sprintf("%s-%d", phase, i)
			want[body], published[body] = true, true
			futures[i] = pubs[i%len(pubs)].PublishAsync("jobs", client.Message{Body: []byte(body)})
		}
		for i, f := range futures {
			if _, err := f.Wait(ctx); err != nil {
				t.Fatalf("%s: publish %d: %v", phase, i, err)
			}
		}
		return want
	}
	// consume acks messages of want from the consumers of from until
	// enough holds for the acks so far (by consumer); a delivery whose ack
	// is stale (its subscription ended meanwhile) comes back and is acked
	// then.
	acked := map[string]bool{}
	by := map[string]int{}
	consume := func(phase string, want map[string]bool, from []string, enough func() bool) {
		t.Helper()
		cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}}
		for _, id := range from {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(channels[id])})
		}
		for !enough() {
			i, r, _ := reflect.Select(cases)
			if i == 0 {
				errs := map[string]error{}
				for id, c := range consumers {
					errs[id] = c.Err()
				}
				done := 0
				for b := range want {
					if acked[b] {
						done++
					}
				}
				t.Fatalf("%s: %d of %d messages acked (by consumer: %v; consumer errors %v)\nold owner %s's log:\n%s",
					phase, done, len(want), by, errs, oldOwner, tail(cp.procs[oldOwner].Log(), 6000))
			}
			g := r.Interface().(got)
			body := string(g.d.Body)
			if !want[body] {
				if !published[body] {
					t.Fatalf("%s: %s received %q, never published", phase, g.who, body)
				}
				// An earlier phase's ack was lost with its subscription:
				// at least once, so delivered again.
				t.Logf("%s: %s received %q again", phase, g.who, body)
				g.d.Ack()
				continue
			}
			err := g.d.Ack()
			switch {
			case errors.Is(err, client.ErrStaleDelivery):
				continue // delivered again
			case err != nil:
				t.Fatalf("%s: %s: ack %s: %v", phase, g.who, body, err)
			}
			if !acked[body] {
				acked[body] = true
				by[g.who]++
			}
		}
	}
	consumeAll := func(phase string, want map[string]bool) {
		t.Helper()
		consume(phase, want, cp.ids, func() bool {
			for b := range want {
				if !acked[b] {
					return false
				}
			}
			return true
		})
	}

	const n = 300
	clear(by)
	consumeAll("all", publish("all", n))
	t.Logf("all %d messages acked, by consumer %v", n, by)

	// Each consumer on its own: the others, held back, keep at most their
	// prefetch each, so it must be handed the rest. Then everything is
	// acked.
	const m = 100
	for _, id := range cp.ids {
		phase := "alone-" + id
		want := publish(phase, m)
		clear(by)
		consume(phase, want, []string{id}, func() bool {
			return len(by) > 0 && maxCount(by) >= m-(len(cp.ids)-1)*prefetch
		})
		consumeAll(phase, want)
		t.Logf("%s: by consumer %v", phase, by)
	}
}

func maxCount(m map[string]int) int {
	n := 0
	for _, v := range m {
		n = max(n, v)
	}
	return n
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
