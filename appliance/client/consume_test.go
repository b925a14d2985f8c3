package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// publishN publishes bodies "0".."n-1" and waits for their confirms.
func publishN(t *testing.T, c *Client, queue string, n int) {
	t.Helper()
	futures := make([]*Future, n)
	for i := range n {
		futures[i] = c.PublishAsync(queue, Message{ID: fmt.Sprint(i), Body: []byte(fmt.Sprint(i))})
	}
	for i, f := range futures {
		if _, err := f.Wait(testCtx(t)); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
}

// settledLocked reports whether queue q has nothing ready or held.
func (s *fakeServer) settledLocked(q string) bool {
	fq := s.queues[q]
	if fq == nil || len(fq.ready) > 0 {
		return false
	}
	for _, sub := range fq.subs {
		if len(sub.held) > 0 {
			return false
		}
	}
	return true
}

func TestSubscribeHandlerAcks(t *testing.T) {
	s := newFake(t)
	c := dial(t, s, Options{})
	declare(t, c, Queue("q"))
	const n = 300
	publishN(t, c, "q", n)

	var mu sync.Mutex
	var offsets []uint64
	all := make(chan struct{})
	cons, err := c.Subscribe(testCtx(t), "q", SubscribeOptions{Prefetch: 10, Handler: func(ctx context.Context, d *Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		if d.Queue != "q" || string(d.Body) != fmt.Sprint(d.Offset) || d.ID != string(d.Body) || d.Deliveries != 1 {
			t.Errorf("delivery %+v", d)
		}
		offsets = append(offsets, d.Offset)
		if len(offsets) == n {
			close(all)
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if cons.Queue() != "q" || cons.Partitions() != 1 || cons.Messages() != nil {
		t.Errorf("consumer: queue %q, %d partitions, messages %v", cons.Queue(), cons.Partitions(), cons.Messages())
	}
	waitDone(t, all, "all deliveries")
	s.waitFor("every delivery acked", func() bool { return s.settledLocked("q") })
	mu.Lock()
	for i, off := range offsets {
		if off != uint64(i) {
			t.Fatalf("delivery %d has offset %d: out of order", i, off)
		}
	}
	mu.Unlock()
	s.mu.Lock()
	var prefetch uint32
	for _, f := range s.received {
		if f, ok := f.(*wire.Subscribe); ok {
			prefetch = f.Prefetch
		}
	}
	tags, _ := s.ackedLocked()
	s.mu.Unlock()
	if prefetch != 10 {
		t.Errorf("Subscribe.Prefetch = %d, want 10", prefetch)
	}
	if len(tags) != n {
		t.Errorf("%d tags acked, want %d", len(tags), n)
	}
}

// A handler's result settles its delivery: nil acks, an error requeues,
// ErrDiscard discards; a handler that settles itself is not settled again.
func TestHandlerResultSettles(t *testing.T) {
	s := newFake(t)
	c := dial(t, s, Options{})
	declare(t, c, Queue("q"))
	for _, body := range []string{"ok", "retry", "drop", "manual"} {
		if _, err := c.Publish(testCtx(t), "q", Message{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := make(map[string][]int)
	var reported []error
	_, err := c.Subscribe(testCtx(t), "q", SubscribeOptions{
		Handler: func(ctx context.Context, d *Delivery) error {
			mu.Lock()
			seen[string(d.Body)] = append(seen[string(d.Body)], d.Deliveries)
			mu.Unlock()
			switch string(d.Body) {
			case "retry":
				if !d.Redelivered() {
					return errors.New("not yet")
				}
			case "drop":
				return fmt.Errorf("poison: %w", ErrDiscard)
			case "manual":
				if err := d.Ack(); err != nil {
					t.Errorf("manual ack: %v", err)
				}
				return errors.New("ignored: already settled")
			}
			return nil
		},
		OnError: func(err error) {
			mu.Lock()
			reported = append(reported, err)
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.waitFor("all settled", func() bool {
		return s.settledLocked("q") && s.countLocked(wire.TypeAck)+s.countLocked(wire.TypeNack) >= 4
	})
	mu.Lock()
	defer mu.Unlock()
	want := map[string][]int{"ok": {1}, "retry": {1, 2}, "drop": {1}, "manual": {1}}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("deliveries seen %v, want %v", seen, want)
	}
	if len(reported) != 0 {
		t.Errorf("errors reported: %v", reported)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var requeued, discarded, acked int
	for _, f := range s.received {
		switch f := f.(type) {
		case *wire.Nack:
			if f.Requeue {
				requeued += len(f.Tags)
			} else {
				discarded += len(f.Tags)
			}
		case *wire.Ack:
			acked += len(f.Tags)
		}
	}
	if requeued != 1 || discarded != 1 || acked != 3 {
		t.Errorf("requeued %d, discarded %d, acked %d; want 1, 1, 3", requeued, discarded, acked)
	}
}

// With ManualAck the client never settles; handler errors go to OnError.
func TestManualAck(t *testing.T) {
	s := newFake(t)
	c := dial(t, s, Options{})
	declare(t, c, Queue("q"))
	publishN(t, c, "q", 3)
	got := make(chan *Delivery, 3)
	errs := make(chan error, 3)
	_, err := c.Subscribe(testCtx(t), "q", SubscribeOptions{
		ManualAck: true,
		Handler: func(ctx context.Context, d *Delivery) error {
			got <- d
			return errors.New("handler failed")
		},
		OnError: func(err error) { errs <- err },
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := <-errs; err == nil || !strings.Contains(err.Error(), "handler failed") {
			t.Fatalf("OnError got %v, want the handler's error", err)
		}
		d := <-got
		if want := time.Unix(0, fakePublishedAt+int64(d.Offset)); !d.PublishedAt.Equal(want) {
			t.Errorf("published at %v, want %v", d.PublishedAt, want)
		}
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
		if err := d.Nack(true); !errors.Is(err, ErrAlreadySettled) {
			t.Errorf("second settle: %v, want ErrAlreadySettled", err)
		}
	}
	s.waitFor("all acked", func() bool { return s.settledLocked("q") })
	s.mu.Lock()
	tags, _ := s.ackedLocked()
	nacks := s.countLocked(wire.TypeNack)
	s.mu.Unlock()
	if len(tags) != 3 || nacks != 0 {
		t.Errorf("%d tags acked and %d nacks, want 3 and 0", len(tags), nacks)
	}
}

// Concurrency handlers run at once.
func TestSubscribeConcurrency(t *testing.T) {
	s := newFake(t)
	c := dial(t, s, Options{})
	declare(t, c, Queue("q"))
	publishN(t, c, "q", 4)
	var wg sync.WaitGroup
	wg.Add(4)
	_, err := c.Subscribe(testCtx(t), "q", SubscribeOptions{Concurrency: 4, Handler: func(ctx context.Context, d *Delivery) error {
		wg.Done()
		wg.Wait() // returns only once four handlers are running together
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	s.waitFor("all acked", func() bool { return s.settledLocked("q") })
}

// Acks from a busy writer share frames: while the broker does not read,
// the tags of many Acks pile up and go out together.
func TestConsumeBatchesAcks(t *testing.T) {
	firstAck := make(chan struct{})
	resume := make(chan struct{})
	var once sync.Once
	s := newFake(t, func(s *fakeServer) {
		s.onFrame = func(fc *fakeConn, f wire.Frame) bool {
			if f.Type() == wire.TypeAck {
				once.Do(func() {
					close(firstAck)
					<-resume // stop reading: the client's writer blocks on the pipe
				})
			}
			return true
		}
	})
	c := dial(t, s, Options{Dialer: s.dialPipe})
	declare(t, c, Queue("q"))
	const n = 100
	publishN(t, c, "q", n)
	cons, err := c.Consume(testCtx(t), "q", n)
	if err != nil {
		t.Fatal(err)
	}
	ds := make([]*Delivery, n)
	for i := range ds {
		ds[i] = receive(t, cons)
	}
	if err := ds[0].Ack(); err != nil {
		t.Fatal(err)
	}
	waitDone(t, firstAck, "the first ack")
	for _, d := range ds[1:] {
		if err := d.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	close(resume)
	s.waitFor("every delivery acked", func() bool { return s.settledLocked("q") })
	s.mu.Lock()
	tags, frames := s.ackedLocked()
	s.mu.Unlock()
	if len(tags) != n {
		t.Fatalf("%d tags acked, want %d", len(tags), n)
	}
	// The first Ack, perhaps one the writer had started before the broker
	// stopped reading, and then everything else together.
	if frames > 3 {
		t.Errorf("%d tags went out in %d Ack frames, want at most 3", n, frames)
	}
	for i, tag := range tags {
		if tag != ds[i].Tag {
			t.Fatalf("ack %d is tag %d, want %d", i, tag, ds[i].Tag)
		}
	}
}

// Close acks what was acked before it, unsubscribes, and closes Messages;
// the broker gets back what was not acked.
func TestConsumerClose(t *testing.T) {
	s := newFake(t)
	c := dial(t, s, Options{})
	declare(t, c, Queue("q"))
	publishN(t, c, "q", 2)
	cons, err := c.Consume(testCtx(t), "q", 0)
	if err != nil {
		t.Fatal(err)
	}
	d1, d2 := receive(t, cons), receive(t, cons)
	if d1.Stale() || d2.Stale() {
		t.Fatal("a delivery of an open consumer is stale")
	}
	if err := d1.Ack(); err != nil {
		t.Fatal(err)
	}
	if !d1.Stale() {
		t.Error("an acked delivery is not stale")
	}
	if err := cons.Close(); err != nil {
		t.Fatal(err)
	}
	if !d2.Stale() {
		t.Error("a delivery of a closed consumer is not stale")
	}
	if _, ok := <-cons.Messages(); ok {
		t.Error("Messages still open after Close")
	}
	waitDone(t, cons.Done(), "consumer done")
	if err := cons.Err(); err != nil {
		t.Errorf("Err after Close = %v", err)
	}
	if err := d2.Ack(); !errors.Is(err, ErrStaleDelivery) {
		t.Errorf("ack after Close: %v, want ErrStaleDelivery", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var order []wire.FrameType
	for _, f := range s.received {
		if t := f.Type(); t == wire.TypeAck || t == wire.TypeUnsubscribe {
			order = append(order, t)
		}
	}
	if fmt.Sprint(order) != fmt.Sprint([]wire.FrameType{wire.TypeAck, wire.TypeUnsubscribe}) {
		t.Errorf("frames %v, want the Ack before the Unsubscribe", order)
	}
	if q := s.queues["q"]; len(q.ready) != 1 || string(q.ready[0].body) != string(d2.Body) {
		t.Errorf("after Close the queue holds %d ready, want the unacked one", len(q.ready))
	}
}

func TestSubscribeErrors(t *testing.T) {
	s := newFake(t)
	c := dial(t, s, Options{})
	if _, err := c.Consume(testCtx(t), "nowhere", 1); !errors.Is(err, ErrNotFound) {
		t.Errorf("consume a missing queue: %v, want ErrNotFound", err)
	}
	if _, err := c.Subscribe(testCtx(t), "q", SubscribeOptions{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("subscribe without a handler: %v, want ErrInvalid", err)
	}
	if _, err := c.Consume(testCtx(t), "q", -1); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative prefetch: %v, want ErrInvalid", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Consume(ctx, "q", 1); !errors.Is(err, context.Canceled) {
		t.Errorf("consume with a cancelled ctx: %v, want context.Canceled", err)
	}
}

// A tag the broker refuses (its lease expired) reaches OnError.
func TestSettleErrorReported(t *testing.T) {
	s := newFake(t)
	c := dial(t, s, Options{})
	declare(t, c, Queue("q"))
	publishN(t, c, "q", 1)
	errs := make(chan error, 1)
	cons, err := c.subscribe(testCtx(t), "q", SubscribeOptions{OnError: func(err error) { errs <- err }})
	if err != nil {
		t.Fatal(err)
	}
	d := receive(t, cons)
	s.mu.Lock() // the lease expires
	for _, sub := range s.queues["q"].subs {
		delete(sub.held, d.Tag)
	}
	s.mu.Unlock()
	if err := d.Ack(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !errors.Is(err, ErrStaleTag) {
			t.Errorf("reported %v, want ErrStaleTag", err)
		}
	case <-testCtx(t).Done():
		t.Fatal("no settle error reported")
	}
}

// Closing the client ends its consumers: handlers see their ctx cancelled
// and what they return is still settled before Goodbye.
func TestClientCloseEndsConsumers(t *testing.T) {
	s := newFake(t)
	c := dial(t, s, Options{})
	declare(t, c, Queue("q"))
	publishN(t, c, "q", 1)
	running := make(chan struct{})
	cons, err := c.Subscribe(testCtx(t), "q", SubscribeOptions{Handler: func(ctx context.Context, d *Delivery) error {
		close(running)
		<-ctx.Done()
		return ctx.Err() // requeue
	}})
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, running, "the handler")
	c.Close()
	waitDone(t, cons.Done(), "the consumer")
	s.mu.Lock()
	defer s.mu.Unlock()
	var order []wire.FrameType
	for _, f := range s.received {
		if t := f.Type(); t == wire.TypeNack || t == wire.TypeGoodbye {
			order = append(order, t)
		}
	}
	if fmt.Sprint(order) != fmt.Sprint([]wire.FrameType{wire.TypeNack, wire.TypeGoodbye}) {
		t.Errorf("frames %v, want the handler's Nack before Goodbye", order)
	}
}

// Requeue and Reject are Nack's two meanings by name: a requeued message
// comes again, one more delivery counted; a rejected one is gone.
func TestRequeueAndReject(t *testing.T) {
	s := newFake(t)
	c := dial(t, s, Options{})
	declare(t, c, Queue("q"))
	publishN(t, c, "q", 1)
	cons, err := c.Consume(testCtx(t), "q", 1)
	if err != nil {
		t.Fatal(err)
	}
	first := receive(t, cons)
	if err := first.Requeue(); err != nil {
		t.Fatal(err)
	}
	again := receive(t, cons)
	if again.Offset != first.Offset || again.Deliveries != 2 {
		t.Fatalf("after Requeue got %+v, want offset %d delivered twice", again, first.Offset)
	}
	if err := again.Reject(); err != nil {
		t.Fatal(err)
	}
	if err := again.Requeue(); !errors.Is(err, ErrAlreadySettled) {
		t.Fatalf("Requeue after Reject: %v, want ErrAlreadySettled", err)
	}
	s.waitFor("the rejected message gone", func() bool { return s.settledLocked("q") })
}

// A handler may close its own Consumer: Close returns at once, no handler
// starts after it, the handler's own ack goes out, and the Consumer ends
// once the handler returned, the rest of the queue left to the broker.
func TestCloseFromItsOwnHandler(t *testing.T) {
	s := newFake(t)
	c := dial(t, s, Options{})
	declare(t, c, Queue("q"))
	publishN(t, c, "q", 5)
	var calls atomic.Int32
	closed := make(chan error, 1)
	var cons *Consumer
	ready := make(chan struct{})
	cons, err := c.Subscribe(testCtx(t), "q", SubscribeOptions{Prefetch: 5, Concurrency: 1, Handler: func(ctx context.Context, d *Delivery) error {
		<-ready
		if calls.Add(1) == 1 {
			closed <- cons.Close()
			if ctx.Err() == nil {
				t.Error("the handlers' context is not cancelled after Close")
			}
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	close(ready)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close from the handler: %v", err)
		}
	case <-testCtx(t).Done():
		t.Fatal("Close from the handler did not return")
	}
	waitDone(t, cons.Done(), "the consumer to end after its handlers returned")
	if n := calls.Load(); n != 1 {
		t.Errorf("%d handler calls: one started after Close returned", n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.queues["q"]; len(q.ready) != 5-int(calls.Load()) {
		t.Errorf("after the close the queue holds %d ready, want the %d no handler took", len(q.ready), 5-calls.Load())
	}
}
