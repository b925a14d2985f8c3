package acceptance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
)

// ErrStuck is returned by Drain when a queue still counts unsettled
// messages when ctx ends.
var ErrStuck = errors.New("acceptance: queue stuck")

// Drain reads every queue to its end with a fresh consumer and acks what
// it reads, recording each message as a KindDrain event in h. Run it with
// no other consumer on the queues (stop the Runner first). A queue's end
// is when the admin API at admin counts no unsettled message; a queue
// that still counts some when ctx ends is stuck (ErrStuck). It returns
// the number of messages drained.
func Drain(ctx context.Context, h *History, addr, admin string, queues []QueueSpec) (int, error) {
	c, err := client.Dial(ctx, addr, client.Options{ClientName: "acceptance-drain", Logger: quiet(), DisableReconnect: true})
	if err != nil {
		return 0, fmt.Errorf("acceptance: drain: dial %s: %w", addr, err)
	}
	defer c.Close()
	total := 0
	for _, q := range queues {
		n, err := drainQueue(ctx, h, c, admin, q.Name)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, h.Sync()
}

func drainQueue(ctx context.Context, h *History, c *client.Client, admin, queue string) (int, error) {
	qi, err := GetQueueInfo(ctx, admin, queue)
	if err != nil {
		return 0, err
	}
	if qi.Unavailable != "" {
		return 0, fmt.Errorf("acceptance: drain %s: queue unavailable: %s", queue, qi.Unavailable)
	}
	h.Note("drain %s: %d unsettled messages at the start", queue, qi.Messages)
	cons, err := c.Consume(ctx, queue, 500)
	if err != nil {
		return 0, fmt.Errorf("acceptance: drain %s: consume: %w", queue, err)
	}
	defer cons.Close()
	// The end is when the broker counts nothing unsettled: acks a stopped
	// consumer sent just before may still be applying when the drain
	// starts, so the count at the start is not the number to read.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	got := 0
	for {
		select {
		case d, ok := <-cons.Messages():
			if !ok {
				return got, fmt.Errorf("acceptance: drain %s: consumer ended after %d: %v", queue, got, cons.Err())
			}
			e := Event{Kind: KindDrain, Queue: queue, ID: d.ID, Part: d.Partition, Off: d.Offset, N: d.Deliveries}
			if !bytes.Equal(d.Body, Body(d.ID, len(d.Body))) {
				e.Err = fmt.Sprintf("body %.40q is not Body(%q)", d.Body, d.ID)
			}
			h.Record(e)
			if err := d.Ack(); err != nil {
				return got, fmt.Errorf("acceptance: drain %s: ack: %w", queue, err)
			}
			got++
		case <-tick.C:
			if qi, err := GetQueueInfo(ctx, admin, queue); err == nil && qi.Messages == 0 {
				return got, nil
			}
		case <-ctx.Done():
			now, _ := GetQueueInfo(context.Background(), admin, queue)
			return got, fmt.Errorf("%w: drain %s: %d messages read, %d still unsettled (%d ready, %d in flight, %d consumers): %v",
				ErrStuck, queue, got, now.Messages, now.Ready, now.InFlight, now.Consumers, ctx.Err())
		}
	}
}
