package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// holdPublishes makes the fake keep every Publish unanswered; the test
// answers them with fc.send.
func holdPublishes(s *fakeServer) func() ([]*wire.Publish, *fakeConn) {
	var held []*wire.Publish
	var conn *fakeConn
	s.onFrame = func(fc *fakeConn, f wire.Frame) bool {
		p, ok := f.(*wire.Publish)
		if !ok {
			return true
		}
		s.mu.Lock()
		held, conn = append(held, p), fc
		s.received = append(s.received, p)
		s.changedLocked()
		s.mu.Unlock()
		return false
	}
	return func() ([]*wire.Publish, *fakeConn) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return append([]*wire.Publish(nil), held...), conn
	}
}

// Many publishes are in flight at once, and confirms that come back in any
// order complete the right futures.
func TestPublishPipelined(t *testing.T) {
	var held func() ([]*wire.Publish, *fakeConn)
	s := newFake(t, func(s *fakeServer) { held = holdPublishes(s) })
	c := dial(t, s, Options{})
	const n = 200
	futures := make([]*Future, n)
	for i := range n {
		futures[i] = c.PublishAsync("q", Message{ID: fmt.Sprint(i), Key: "k", Body: []byte(fmt.Sprint("body ", i))})
	}
	s.waitFor("all publishes in flight", func() bool { return s.countLocked(wire.TypePublish) == n })
	for _, f := range futures {
		select {
		case <-f.Done():
			t.Fatal("a future completed before its confirm")
		default:
		}
	}
	pubs, fc := held()
	corrs := make(map[uint64]bool)
	var confirms []wire.Frame
	for i := len(pubs) - 1; i >= 0; i-- { // answer in reverse order
		p := pubs[i]
		if p.Corr == 0 || corrs[p.Corr] {
			t.Fatalf("publish %d has Corr %d: zero or repeated", i, p.Corr)
		}
		corrs[p.Corr] = true
		var id int
		fmt.Sscan(p.MessageID, &id)
		if string(p.Body) != fmt.Sprint("body ", id) || p.Queue != "q" || p.Key != "k" {
			t.Fatalf("publish %d = %+v", i, p)
		}
		confirms = append(confirms, &wire.Confirm{Corr: p.Corr, Partition: uint16(id % 3), Offset: uint64(1000 + id), Duplicate: id%2 == 1})
	}
	fc.send(confirms...)
	for i, f := range futures {
		cf, err := f.Wait(testCtx(t))
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if want := (Confirm{Partition: i % 3, Offset: uint64(1000 + i), Duplicate: i%2 == 1}); cf != want {
			t.Errorf("publish %d confirmed %+v, want %+v", i, cf, want)
		}
		if cf2, err := f.Result(); cf2 != cf || err != nil {
			t.Errorf("Result after Wait = %+v, %v", cf2, err)
		}
	}
}

// Publish from many goroutines against the fake's real confirms.
func TestPublishConcurrent(t *testing.T) {
	s := newFake(t)
	c := dial(t, s, Options{MaxInFlight: 16})
	declare(t, c, Queue("q"))
	const goroutines, each = 8, 50
	errs := make(chan error, goroutines)
	offsets := make(chan uint64, goroutines*each)
	for g := range goroutines {
		go func() {
			for i := range each {
				cf, err := c.Publish(testCtx(t), "q", Message{Body: []byte(fmt.Sprint(g, "/", i))})
				if err != nil {
					errs <- err
					return
				}
				offsets <- cf.Offset
			}
			errs <- nil
		}()
	}
	for range goroutines {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(offsets)
	seen := make(map[uint64]bool)
	for off := range offsets {
		if seen[off] {
			t.Fatalf("offset %d confirmed twice", off)
		}
		seen[off] = true
	}
	if len(seen) != goroutines*each {
		t.Fatalf("%d confirms, want %d", len(seen), goroutines*each)
	}
}

func TestPublishErrors(t *testing.T) {
	s := newFake(t, func(s *fakeServer) { s.maxFrame = wire.MinFrameLimit })
	c := dial(t, s, Options{})
	declare(t, c, Queue("small").MaxMessages(1).DedupeWindow(1000000))

	if _, err := c.Publish(testCtx(t), "small", Message{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Publish(testCtx(t), "small", Message{ID: "b"})
	if !errors.Is(err, ErrQueueFull) || !IsRetryable(err) {
		t.Errorf("publish to a full queue: %v, want retryable ErrQueueFull", err)
	}
	cf, err := c.Publish(testCtx(t), "small", Message{ID: "a"})
	if err != nil || !cf.Duplicate || cf.Offset != 0 {
		t.Errorf("repeat of a stored id: %+v, %v; want a duplicate of offset 0", cf, err)
	}
	_, err = c.PublishAsync("nowhere", Message{}).Result()
	if !errors.Is(err, ErrNotFound) || IsRetryable(err) {
		t.Errorf("publish to a missing queue: %v, want ErrNotFound", err)
	}

	before := func() int { s.mu.Lock(); defer s.mu.Unlock(); return s.countLocked(wire.TypePublish) }()
	// Refused locally: a body that would not fit a Deliver frame of the
	// broker's MaxFrame, a header key that is not UTF-8, no queue.
	_, err = c.Publish(testCtx(t), "small", Message{Body: make([]byte, wire.MinFrameLimit)})
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("publish above MaxFrame: %v, want ErrTooLarge", err)
	}
	_, err = c.Publish(testCtx(t), "small", Message{Headers: []Header{{Key: "\xff", Value: "v"}}})
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("publish with a bad header key: %v, want ErrInvalid", err)
	}
	if _, err := c.PublishAsync("", Message{}).Result(); !errors.Is(err, ErrInvalid) {
		t.Errorf("publish without a queue: %v, want ErrInvalid", err)
	}
	if after := func() int { s.mu.Lock(); defer s.mu.Unlock(); return s.countLocked(wire.TypePublish) }(); after != before {
		t.Errorf("%d refused publishes reached the broker", after-before)
	}
	// The connection is unharmed.
	if _, err := c.DeclareQueue(testCtx(t), Queue("other")); err != nil {
		t.Errorf("declare after local refusals: %v", err)
	}
}

// A cancelled ctx ends Publish and Future.Wait, not the publish.
func TestPublishContextCancel(t *testing.T) {
	var held func() ([]*wire.Publish, *fakeConn)
	s := newFake(t, func(s *fakeServer) { held = holdPublishes(s) })
	c := dial(t, s, Options{})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Publish(ctx, "q", Message{Body: []byte("x")})
		done <- err
	}()
	s.waitFor("the publish", func() bool { return s.countLocked(wire.TypePublish) == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Publish after cancel: %v, want context.Canceled", err)
	}

	f := c.PublishAsync("q", Message{Body: []byte("y")})
	s.waitFor("the second publish", func() bool { return s.countLocked(wire.TypePublish) == 2 })
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if _, err := f.Wait(ctx2); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with a cancelled ctx: %v", err)
	}
	// The publish goes on: its confirm still completes the future.
	pubs, fc := held()
	fc.send(&wire.Confirm{Corr: pubs[1].Corr, Offset: 7})
	if cf, err := f.Wait(testCtx(t)); err != nil || cf.Offset != 7 {
		t.Errorf("future after its confirm: %+v, %v", cf, err)
	}
}

// MaxInFlight bounds unanswered publishes; a synchronous Publish waiting
// for a slot gives up when its ctx ends.
func TestPublishMaxInFlight(t *testing.T) {
	var held func() ([]*wire.Publish, *fakeConn)
	s := newFake(t, func(s *fakeServer) { held = holdPublishes(s) })
	c := dial(t, s, Options{MaxInFlight: 2})
	f1 := c.PublishAsync("q", Message{})
	f2 := c.PublishAsync("q", Message{})
	s.waitFor("two publishes", func() bool { return s.countLocked(wire.TypePublish) == 2 })

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Publish(ctx, "q", Message{}); !errors.Is(err, context.Canceled) {
		t.Errorf("publish past MaxInFlight with a cancelled ctx: %v", err)
	}
	third := make(chan *Future)
	go func() { third <- c.PublishAsync("q", Message{}) }()

	pubs, fc := held()
	fc.send(&wire.Confirm{Corr: pubs[0].Corr, Offset: 1})
	if _, err := f1.Result(); err != nil {
		t.Fatal(err)
	}
	f3 := <-third // a slot freed
	s.waitFor("the third publish", func() bool { return s.countLocked(wire.TypePublish) == 3 })
	pubs, _ = held()
	fc.send(&wire.Confirm{Corr: pubs[1].Corr, Offset: 2}, &wire.Confirm{Corr: pubs[2].Corr, Offset: 3})
	for _, f := range []*Future{f2, f3} {
		if _, err := f.Result(); err != nil {
			t.Fatal(err)
		}
	}
}

// Close lets the broker answer what it has read before its Goodbye.
func TestCloseAnswersInFlight(t *testing.T) {
	s := newFake(t)
	c := dial(t, s, Options{})
	declare(t, c, Queue("q"))
	var futures []*Future
	for range 50 {
		futures = append(futures, c.PublishAsync("q", Message{Body: []byte("x")}))
	}
	c.Close()
	for i, f := range futures {
		select {
		case <-f.Done():
		default:
			t.Fatalf("future %d not complete after Close", i)
		}
		if _, err := f.Result(); err != nil {
			t.Errorf("publish %d: %v", i, err)
		}
	}
	s.mu.Lock()
	last := s.received[len(s.received)-1]
	s.mu.Unlock()
	if last.Type() != wire.TypeGoodbye {
		t.Errorf("last frame = %s, want Goodbye", last.Type())
	}
}

// Flush waits for every publish in flight, answered in any order, and
// ends with its ctx while one is still unanswered; with nothing in flight
// it returns at once.
func TestFlushWaitsForEveryPublish(t *testing.T) {
	var held func() ([]*wire.Publish, *fakeConn)
	s := newFake(t, func(s *fakeServer) { held = holdPublishes(s) })
	c := dial(t, s, Options{})
	if err := c.Flush(testCtx(t)); err != nil {
		t.Fatalf("flush with nothing in flight: %v", err)
	}
	const n = 3
	for i := range n {
		c.PublishAsync("q", Message{Body: []byte{byte(i)}})
	}
	s.waitFor("the publishes in flight", func() bool { return s.countLocked(wire.TypePublish) == n })
	pubs, fc := held()
	fc.send(&wire.Confirm{Corr: pubs[2].Corr}, &wire.Confirm{Corr: pubs[0].Corr, Offset: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("flush with a publish unanswered: %v, want the deadline", err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Flush(testCtx(t)) }()
	fc.send(&wire.Confirm{Corr: pubs[1].Corr, Offset: 2})
	if err := <-done; err != nil {
		t.Fatalf("flush once every publish was answered: %v", err)
	}
}
