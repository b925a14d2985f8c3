package client_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/internal/brokertest"
)

// BenchmarkPublishConsume publishes b.N 1 KiB messages with PublishAsync
// (at most 256 in flight) to a buffered queue on a real broker on
// loopback, and consumes and acks them on a second connection: the
// client's cost per message on both paths (the broker runs in the same
// process, so its allocations count too; -memprofile tells them apart).
func BenchmarkPublishConsume(b *testing.B) {
	_, addr := brokertest.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pub, err := client.Dial(ctx, addr, client.Options{ClientName: "bench-pub", Logger: quiet(), MaxInFlight: 256})
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	sub, err := client.Dial(ctx, addr, client.Options{ClientName: "bench-sub", Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	if _, err := pub.DeclareQueue(ctx, client.Queue("bench").Buffered()); err != nil {
		b.Fatal(err)
	}
	var got atomic.Int64
	all := make(chan struct{})
	target := int64(b.N)
	if _, err := sub.Subscribe(ctx, "bench", client.SubscribeOptions{Prefetch: 1000, Handler: func(context.Context, *client.Delivery) error {
		if got.Add(1) == target {
			close(all)
		}
		return nil
	}}); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 1024)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	fs := make(chan *client.Future, 256)
	go func() {
		defer close(fs)
		for range b.N {
			fs <- pub.PublishAsync("bench", client.Message{Body: body})
		}
	}()
	for f := range fs {
		if _, err := f.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-all:
	case <-ctx.Done():
		b.Fatal("deliveries did not all arrive")
	}
}
