package federation

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/client"
)

// One connection publishing through a node that does not own the queue
// sees its confirms in its own publish order, as it would on the owner:
// with no fault, and while the owner restarts (publishes the restart cut
// off fail; those confirmed still come in order).
func TestForwardedPublishesKeepTheirOrder(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{clients: true})
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "ordered", Durability: appliance.Durable}, "")
	via := nodes.other(owner)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := via.dial(t, ctx)

	publish := func(phase string, n int, during func()) (confirmed int) {
		futures := make([]*client.Future, n)
		for i := range n {
			futures[i] = cl.PublishAsyncContext(ctx, "ordered", client.Message{Body: []byte(fmt.Sprintf("%s-%d", phase, i))})
			if i == n/4 && during != nil {
				during()
			}
		}
		last, lastAt := int64(-1), -1
		for i, f := range futures {
			cf, err := f.Wait(ctx)
			if err != nil {
				if during == nil || !errors.Is(err, client.ErrUnavailable) && !errors.Is(err, client.ErrConnectionLost) {
					t.Fatalf("%s: publish %d: %v", phase, i, err)
				}
				continue
			}
			if int64(cf.Offset) <= last {
				t.Fatalf("%s: publish %d confirmed at offset %d, but publish %d, sent before it, at %d",
					phase, i, cf.Offset, lastAt, last)
			}
			last, lastAt = int64(cf.Offset), i
			confirmed++
		}
		return confirmed
	}
	if got := publish("steady", 400, nil); got != 400 {
		t.Fatalf("steady: %d of 400 confirmed", got)
	}
	restarted := make(chan struct{})
	got := publish("restart", 400, func() {
		go func() {
			defer close(restarted)
			owner.restart(t)
		}()
	})
	<-restarted
	after := publish("after", 50, nil)
	if after != 50 {
		t.Fatalf("after the owner's restart: %d of 50 confirmed", after)
	}
	t.Logf("across the owner's restart %d of 400 publishes confirmed, in order", got)
}
