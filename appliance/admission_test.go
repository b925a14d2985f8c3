package appliance

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// publishAll publishes n messages of size bytes at once, without waiting
// for any confirm, and returns how many confirmed and the errors of the
// others, by error text.
func publishAll(t *testing.T, b *Broker, queue string, n, size int) (confirmed int64, failed map[string]int) {
	t.Helper()
	var ok atomic.Int64
	var mu sync.Mutex
	failed = map[string]int{}
	var wg sync.WaitGroup
	body := bytes.Repeat([]byte("x"), size)
	for i := range n {
		wg.Add(1)
		go b.PublishAsync(queue, Message{Body: body, Headers: []Header{{Key: "i", Value: fmt.Sprint(i)}}}, func(_ Confirm, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				failed[errors.Unwrap(err).Error()]++
				mu.Unlock()
				return
			}
			ok.Add(1)
		})
	}
	wg.Wait()
	return ok.Load(), failed
}

// Pipelined publishes far below the message limit are never refused as
// too large, in either mode: batches are cut well below what a segment
// takes, and a full pending batch slows the publishers instead.
func TestPipelinedPublishesAreNeverTooLarge(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{Logger: quietLogger(), SegmentSize: 8 << 20})
	defer b.Close()
	for _, tc := range []struct {
		mode    Durability
		n, size int
	}{
		{Buffered, 1200, 16 << 10},
		{Durable, 400, 16 << 10},
		{Buffered, 40, 1 << 20},
	} {
		name := fmt.Sprintf("%s-%d", tc.mode, tc.size)
		declare(t, ctx, b, QueueConfig{Name: name, Durability: tc.mode})
		if got, failed := publishAll(t, b, name, tc.n, tc.size); got != int64(tc.n) {
			t.Errorf("%s: %d of %d confirmed; refused: %v", name, got, tc.n, failed)
		}
		if in := info(t, b, name); in.Messages != int64(tc.n) {
			t.Errorf("%s holds %d messages, want %d", name, in.Messages, tc.n)
		}
	}
}

// A queue's limits hold under concurrent publishers: reject lets exactly
// the room in and never more (publishes admitted but not yet applied
// count); drop-oldest takes every publish and keeps the queue within its
// limit.
func TestLimitsHoldUnderConcurrentPublishers(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{Logger: quietLogger()})
	defer b.Close()
	for _, mode := range []Durability{Buffered, Durable} {
		name := "reject-" + mode.String()
		declare(t, ctx, b, QueueConfig{Name: name, Durability: mode, MaxMessages: 5})
		got, failed := publishAll(t, b, name, 500, 10)
		if got != 5 || failed["queue full"] != 495 {
			t.Errorf("%s: %d confirmed, refused %v; want 5 and 495 queue full", name, got, failed)
		}
		if in := info(t, b, name); in.Messages != 5 {
			t.Errorf("%s holds %d messages, limit 5", name, in.Messages)
		}

		name = "bytes-" + mode.String()
		declare(t, ctx, b, QueueConfig{Name: name, Durability: mode, MaxBytes: 1000})
		// Each stores its 100-byte body and its header ("i" and 1 to 3
		// digits): 102 to 104 bytes, so 9 fit and never 10.
		if got, _ := publishAll(t, b, name, 300, 100); got != 9 {
			t.Errorf("%s: %d messages of 102-104 stored bytes confirmed under a 1000-byte limit, want 9", name, got)
		}
		if in := info(t, b, name); in.Bytes > 1000 {
			t.Errorf("%s holds %d bytes, limit 1000", name, in.Bytes)
		}

		name = "drop-" + mode.String()
		declare(t, ctx, b, QueueConfig{Name: name, Durability: mode, MaxMessages: 5, Overflow: OverflowDropOldest})
		// Every publish is taken, the room held by publishes not applied
		// yet included: a publisher waits for them to become droppable.
		if got, failed := publishAll(t, b, name, 300, 10); got != 300 {
			t.Errorf("%s: %d of 300 publishes confirmed under drop-oldest, refused %v", name, got, failed)
		}
		waitFor(t, ctx, name+"'s discards to apply", func() bool { return info(t, b, name).Messages <= 5 })
		if in := info(t, b, name); in.Messages != 5 {
			t.Errorf("%s holds %d messages after 300 publishes, want its limit 5", name, in.Messages)
		}
	}
}
