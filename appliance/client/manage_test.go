package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/internal/await"
)

// dialBroker connects to a real broker and server on loopback.
func dialBroker(t *testing.T) (*client.Client, context.Context) {
	t.Helper()
	_, addr := startBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	c, err := client.Dial(ctx, addr, client.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, ctx
}

// waitInfo waits until the queue's state satisfies ok, and returns it.
func waitInfo(t *testing.T, ctx context.Context, c *client.Client, queue, what string, ok func(client.QueueInfo) bool) client.QueueInfo {
	t.Helper()
	var in client.QueueInfo
	await.Until(t, ctx, what, func() bool {
		var err error
		if in, err = c.QueueInfo(ctx, queue); err != nil {
			t.Fatalf("queue info %s: %v", queue, err)
		}
		return ok(in)
	})
	return in
}

// Against a real broker: QueueInfo counts what was published, delivered
// and acked, and reports each partition's written and durable frontiers;
// PurgeQueue discards the ready messages, says how many, and they are
// never delivered; what was in flight stays with its consumer.
func TestQueueInfoAndPurgeAgainstBroker(t *testing.T) {
	c, ctx := dialBroker(t)
	if _, err := c.DeclareQueue(ctx, client.Queue("work").Partitions(2)); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		if _, err := c.Publish(ctx, "work", client.Message{Key: fmt.Sprint(i), Body: []byte(fmt.Sprintf("before-%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	in, err := c.QueueInfo(ctx, "work")
	if err != nil {
		t.Fatal(err)
	}
	if in.Queue != "work" || in.Durability != client.Durable || in.Ready != 6 || in.InFlight != 0 || in.Messages() != 6 ||
		in.Consumers != 0 || in.Bytes < uint64(6*len("before-0")) || len(in.Partitions) != 2 || in.Unavailable != "" {
		t.Fatalf("after 6 publishes: %+v", in)
	}
	var written uint64
	for i, p := range in.Partitions {
		if p.DurableNext > p.WrittenNext {
			t.Errorf("partition %d: durable frontier %d above written %d", i, p.DurableNext, p.WrittenNext)
		}
		written += p.WrittenNext
	}
	if written < 6 {
		t.Errorf("frontiers %+v: %d records written, want at least the 6 publishes", in.Partitions, written)
	}

	// Three delivered, then one of them acked: the window of 3 takes a
	// fourth, so 1 settled, 3 in flight, 2 ready.
	cons, err := c.Consume(ctx, "work", 3)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var held []*client.Delivery
	for range 3 {
		held = append(held, receive(t, cons))
	}
	waitInfo(t, ctx, c, "work", "3 ready, 3 in flight, 1 consumer", func(in client.QueueInfo) bool {
		return in.Ready == 3 && in.InFlight == 3 && in.Consumers == 1
	})
	if err := held[0].Ack(); err != nil {
		t.Fatal(err)
	}
	held = append(held[1:], receive(t, cons))
	waitInfo(t, ctx, c, "work", "2 ready, 3 in flight after an ack", func(in client.QueueInfo) bool {
		return in.Ready == 2 && in.InFlight == 3 && in.Messages() == 5
	})

	purged, err := c.PurgeQueue(ctx, "work")
	if err != nil || purged != 2 {
		t.Fatalf("purge: %d, %v; want 2", purged, err)
	}
	if in, err := c.QueueInfo(ctx, "work"); err != nil || in.Ready != 0 || in.InFlight != 3 {
		t.Fatalf("after the purge: %+v, %v; want 0 ready, 3 in flight", in, err)
	}
	// Settle what was in flight; a message published now is the only one
	// the queue has left to deliver.
	for _, d := range held {
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Publish(ctx, "work", client.Message{Body: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	if d := receive(t, cons); string(d.Body) != "after" {
		t.Fatalf("delivered %q after the purge, want \"after\"", d.Body)
	}
	waitInfo(t, ctx, c, "work", "nothing but \"after\" in the queue", func(in client.QueueInfo) bool {
		return in.Ready == 0 && in.InFlight == 1
	})
	if n, err := c.PurgeQueue(ctx, "work"); err != nil || n != 0 {
		t.Fatalf("a purge with nothing ready: %d, %v", n, err)
	}

	for _, err := range []error{
		func() error { _, err := c.QueueInfo(ctx, "nope"); return err }(),
		func() error { _, err := c.PurgeQueue(ctx, "nope"); return err }(),
		c.DeleteQueue(ctx, "nope"),
	} {
		if !errors.Is(err, client.ErrNotFound) {
			t.Errorf("an unknown queue: %v, want ErrNotFound", err)
		}
	}
}

// Against a real broker: DeleteQueue with IfEmpty refuses a queue that
// holds a message, ready or in flight; without it the queue goes, a
// publish to it fails with ErrNotFound, and its consumer ends with
// ErrNotFound. An empty queue goes with IfEmpty.
func TestDeleteQueueAgainstBroker(t *testing.T) {
	c, ctx := dialBroker(t)
	if _, err := c.DeclareQueue(ctx, client.Queue("doomed").Buffered()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, "doomed", client.Message{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteQueue(ctx, "doomed", client.IfEmpty()); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("delete if empty of a queue holding a ready message: %v, want ErrConflict", err)
	}
	cons, err := c.Consume(ctx, "doomed", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	receive(t, cons)
	if err := c.DeleteQueue(ctx, "doomed", client.IfEmpty()); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("delete if empty of a queue holding a message in flight: %v, want ErrConflict", err)
	}
	if _, err := c.QueueInfo(ctx, "doomed"); err != nil {
		t.Fatalf("a refused delete removed the queue: %v", err)
	}

	if err := c.DeleteQueue(ctx, "doomed"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, "doomed", client.Message{Body: []byte("y")}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("publish to a deleted queue: %v, want ErrNotFound", err)
	}
	if _, err := c.QueueInfo(ctx, "doomed"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("info of a deleted queue: %v, want ErrNotFound", err)
	}
	select {
	case <-cons.Done():
	case <-ctx.Done():
		t.Fatal("the consumer of a deleted queue did not end")
	}
	if d, open := <-cons.Messages(); open {
		t.Fatalf("a delivery from a deleted queue: %q", d.Body)
	}
	if err := cons.Err(); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("consumer of a deleted queue ended with %v, want ErrNotFound", err)
	}

	if _, err := c.DeclareQueue(ctx, client.Queue("empty")); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteQueue(ctx, "empty", client.IfEmpty()); err != nil {
		t.Fatalf("delete if empty of an empty queue: %v", err)
	}
	if _, err := c.QueueInfo(ctx, "empty"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("info of a deleted queue: %v, want ErrNotFound", err)
	}
}

// receive takes the next delivery from a channel consumer.
func receive(t *testing.T, cons *client.Consumer) *client.Delivery {
	t.Helper()
	select {
	case d, ok := <-cons.Messages():
		if !ok {
			t.Fatalf("consumer ended: %v", cons.Err())
		}
		return d
	case <-time.After(30 * time.Second):
		t.Fatal("timed out waiting for a delivery")
	}
	return nil
}
