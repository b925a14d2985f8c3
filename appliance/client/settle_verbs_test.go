package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
)

// handled subscribes with ManualAck and hands deliveries and OnError's
// errors to channels.
func handled(t *testing.T, ctx context.Context, c *client.Client, queue string, prefetch int) (<-chan *client.Delivery, <-chan error) {
	t.Helper()
	ds, errs := make(chan *client.Delivery, 64), make(chan error, 64)
	_, err := c.Subscribe(ctx, queue, client.SubscribeOptions{
		Prefetch:  prefetch,
		ManualAck: true,
		Handler:   func(_ context.Context, d *client.Delivery) error { ds <- d; return nil },
		OnError:   func(err error) { errs <- err },
	})
	if err != nil {
		t.Fatal(err)
	}
	return ds, errs
}

func next[T any](t *testing.T, ctx context.Context, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("no %s: %v", what, ctx.Err())
		var zero T
		return zero
	}
}

func dialTo(t *testing.T, ctx context.Context, addr string) *client.Client {
	t.Helper()
	c, err := client.Dial(ctx, addr, client.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A handler slower than the queue's ack deadline keeps its message by
// calling InProgress: the ack well past the first deadline applies, and
// the message is never delivered again.
func TestInProgressKeepsTheMessage(t *testing.T) {
	const ackDeadline = 300 * time.Millisecond
	b, addr := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := dialTo(t, ctx, addr)
	if _, err := c.DeclareQueue(ctx, client.Queue("slow").AckDeadline(ackDeadline)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, "slow", client.Message{Body: []byte("work")}); err != nil {
		t.Fatal(err)
	}
	ds, errs := handled(t, ctx, c, "slow", 1)
	d := next(t, ctx, ds, "delivery")
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
	in := settled(t, ctx, b, "slow")
	if in.Messages != 0 || in.Counters.Expired != 0 || in.Counters.Redelivered != 0 {
		t.Fatalf("after the ack: %d messages, %d expired, %d redelivered", in.Messages, in.Counters.Expired, in.Counters.Redelivered)
	}
	select {
	case err := <-errs:
		t.Fatalf("the broker refused a settle: %v", err)
	case d := <-ds:
		t.Fatalf("delivered again: %+v", d)
	default:
	}
	if err := d.InProgress(); !errors.Is(err, client.ErrAlreadySettled) {
		t.Fatalf("InProgress after Ack: %v", err)
	}
}

// An InProgress for a delivery whose lease already expired is refused by
// the broker, as an Ack would be: OnError hears of the stale tag.
func TestInProgressAfterExpiry(t *testing.T) {
	_, addr := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := dialTo(t, ctx, addr)
	if _, err := c.DeclareQueue(ctx, client.Queue("q").AckDeadline(50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, "q", client.Message{Body: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	ds, errs := handled(t, ctx, c, "q", 1)
	first := next(t, ctx, ds, "delivery")
	again := next(t, ctx, ds, "redelivery") // the first lease expired
	if again.Deliveries != 2 {
		t.Fatalf("redelivery %+v", again)
	}
	if err := first.InProgress(); err != nil {
		t.Fatal(err)
	}
	if err := next(t, ctx, errs, "settle error"); !errors.Is(err, client.ErrStaleTag) {
		t.Fatalf("InProgress of an expired delivery: %v, want ErrStaleTag", err)
	}
	if err := again.Ack(); err != nil {
		t.Fatal(err)
	}
}

// NackDelay: the consumer stops holding the message at once (with a
// prefetch of 1 the next message comes meanwhile), and the message comes
// back only after the delay, one delivery more.
func TestNackDelay(t *testing.T) {
	const delay = 500 * time.Millisecond
	b, addr := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := dialTo(t, ctx, addr)
	if _, err := c.DeclareQueue(ctx, client.Queue("q")); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"first", "second"} {
		if _, err := c.Publish(ctx, "q", client.Message{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	ds, errs := handled(t, ctx, c, "q", 1)
	first := next(t, ctx, ds, "delivery")
	if string(first.Body) != "first" {
		t.Fatalf("first delivery %q", first.Body)
	}
	nackedAt := time.Now()
	if err := first.NackDelay(delay); err != nil {
		t.Fatal(err)
	}
	if err := first.Ack(); !errors.Is(err, client.ErrAlreadySettled) {
		t.Fatalf("Ack after NackDelay: %v", err)
	}
	second := next(t, ctx, ds, "delivery meanwhile")
	if string(second.Body) != "second" || second.Deliveries != 1 {
		t.Fatalf("meanwhile %q (deliveries %d)", second.Body, second.Deliveries)
	}
	if err := second.Ack(); err != nil {
		t.Fatal(err)
	}
	again := next(t, ctx, ds, "redelivery")
	if waited := time.Since(nackedAt); waited < delay {
		t.Fatalf("redelivered after %v, before the delay of %v", waited, delay)
	}
	if string(again.Body) != "first" || again.Deliveries != 2 {
		t.Fatalf("redelivery %q (deliveries %d)", again.Body, again.Deliveries)
	}
	if err := again.Ack(); err != nil {
		t.Fatal(err)
	}
	if in := settled(t, ctx, b, "q"); in.Messages != 0 || in.Counters.Requeued != 1 {
		t.Fatalf("after the acks: %d messages, %d requeued", in.Messages, in.Counters.Requeued)
	}
	select {
	case err := <-errs:
		t.Fatalf("the broker refused a settle: %v", err)
	default:
	}
}
