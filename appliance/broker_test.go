package appliance

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestPublishConsumeRestart(t *testing.T) {
	for _, mode := range []Durability{Durable, Buffered} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := testCtx(t)
			fs := vfs.NewMem()
			b := openBroker(t, fs, "data", Options{})
			res, err := b.Declare(ctx, QueueConfig{Name: "clicks", Durability: mode, Partitions: 2})
			if err != nil || !res.Created || res.Config.Durability != mode {
				t.Fatalf("declare: %+v %v", res, err)
			}
			if (mode == Buffered) != (res.Warning != "") {
				t.Fatalf("warning %q for %s", res.Warning, mode)
			}
			const n = 200
			for i := 0; i < n; i++ {
				if _, err := b.Publish(ctx, "clicks", Message{Body: body(i)}); err != nil {
					t.Fatal(err)
				}
			}
			c := newCollector()
			sub, err := b.Subscribe("clicks", SubscribeOptions{Prefetch: 10, Deliver: c.deliver})
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for i := 0; i < n/2; i++ {
				d := c.next(t, ctx)
				seen[string(d.Body)] = true
				if err := sub.Ack(d.Tag); err != nil {
					t.Fatal(err)
				}
			}
			sub.Close()
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			b = openBroker(t, fs, "data", Options{})
			defer b.Close()
			info, err := b.QueueInfo("clicks")
			if err != nil {
				t.Fatal(err)
			}
			if info.Messages != n/2 {
				t.Fatalf("after restart %d messages, want %d", info.Messages, n/2)
			}
			c2 := newCollector()
			sub2, err := b.Subscribe("clicks", SubscribeOptions{Prefetch: 50, Deliver: c2.deliver})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < n/2; i++ {
				d := c2.next(t, ctx)
				if seen[string(d.Body)] {
					t.Fatalf("acked message %q came back", d.Body)
				}
				seen[string(d.Body)] = true
				if err := sub2.Ack(d.Tag); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < n; i++ {
				if !seen[string(body(i))] {
					t.Fatalf("message %d never delivered", i)
				}
			}
			if err := sub2.Ack(12345678); !errors.Is(err, ErrStaleTag) {
				t.Fatalf("stale tag: %v", err)
			}
			_ = bytes.Equal
		})
	}
}
