package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strconv"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
)

// These examples need a broker on 127.0.0.1:7420 (`make run`), so they
// compile as documentation but are not run.

func ExampleDial() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, "127.0.0.1:7420", client.Options{
		Token:      os.Getenv("FIBRIL_TOKEN"),
		ClientName: "clickstream",
		MaxBackoff: 10 * time.Second, // reconnect no slower than this
	})
	if errors.Is(err, client.ErrUnauthorized) {
		log.Fatal("the broker refused the token")
	}
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}

func ExampleClient_DeclareQueue() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "127.0.0.1:7420", client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	res, err := c.DeclareQueue(ctx, client.Queue("clicks").Buffered().Partitions(4).DedupeWindow(time.Minute))
	switch {
	case errors.Is(err, client.ErrConflict):
		log.Fatal("clicks exists as a durable queue; its mode cannot change")
	case err != nil:
		log.Fatal(err)
	}
	fmt.Println(res.Queue, res.Durability, res.Partitions, "partitions; created:", res.Created)
	if res.Warning != "" {
		fmt.Println("warning:", res.Warning)
	}
}

func ExampleClient_Publish() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "127.0.0.1:7420", client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// One at a time, retrying what may not have been stored: the ID and
	// the queue's dedupe window make a retry of a stored message harmless.
	msg := client.Message{ID: "click-1", Key: "user-42", Body: []byte(`{"page":"/"}`)}
	for {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		cf, err := c.Publish(ctx, "clicks", msg)
		cancel()
		if err == nil {
			fmt.Println("stored at", cf.Partition, cf.Offset, "duplicate:", cf.Duplicate)
			break
		}
		if !client.IsRetryable(err) && !errors.Is(err, context.DeadlineExceeded) {
			log.Fatal(err)
		}
		time.Sleep(time.Second)
	}

	// Many in flight: PublishAsync returns a Future at once.
	futures := make([]*client.Future, 1000)
	for i := range futures {
		futures[i] = c.PublishAsync("clicks", client.Message{ID: "batch-" + strconv.Itoa(i), Body: []byte("...")})
	}
	for i, f := range futures {
		if _, err := f.Wait(ctx); err != nil {
			log.Printf("publish %d: %v", i, err)
		}
	}
}

func ExampleClient_Subscribe() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "127.0.0.1:7420", client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	cons, err := c.Subscribe(ctx, "clicks", client.SubscribeOptions{
		Prefetch: 100,
		Handler: func(ctx context.Context, d *client.Delivery) error {
			if len(d.Body) == 0 {
				return client.ErrDiscard // nack without requeue: to the dead-letter queue
			}
			fmt.Printf("partition %d offset %d: %s\n", d.Partition, d.Offset, d.Body)
			return nil // ack; any other error nacks with requeue
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cons.Close()
	<-cons.Done() // until the consumer ends (Close, or its queue is gone)
}

func ExampleClient_Consume() {
	ctx := context.Background()
	c, err := client.Dial(ctx, "127.0.0.1:7420", client.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	cons, err := c.Consume(ctx, "clicks", 50)
	if err != nil {
		log.Fatal(err)
	}
	defer cons.Close()
	for d := range cons.Messages() {
		fmt.Printf("%s (delivery %d)\n", d.Body, d.Deliveries)
		if err := d.Ack(); errors.Is(err, client.ErrStaleDelivery) {
			// The connection was lost after this delivery; the broker
			// delivers the message again.
			continue
		}
	}
}
