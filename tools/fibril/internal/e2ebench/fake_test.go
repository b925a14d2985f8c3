package e2ebench

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// fakeTarget is an in-memory broker: a publish is confirmed after
// confirmDelay (plus slow's extra delay for its index, if set; confirms
// then come out of publish order) and delivered right after its confirm,
// unless refuse says to refuse it (failed at once, never delivered). With
// queues above 1 its stream says it spreads over that many queues, and
// its pendings say their confirms may come out of order. published, if
// set, counts every publish, warm-up included.
type fakeTarget struct {
	confirmDelay time.Duration
	slow         func(index int) time.Duration
	refuse       func(index int) bool
	queues       int
	published    *atomic.Int64
}

var errRefused = errors.New("refused")

func (f fakeTarget) System() string { return "fake" }
func (f fakeTarget) Mode() string   { return "memory" }

func (f fakeTarget) Open(ctx context.Context, name string, publishers, window int) (Stream, error) {
	return &fakeStream{t: f, deliveries: make(chan []byte, 1<<16), stop: make(chan struct{})}, nil
}

type fakeStream struct {
	t          fakeTarget
	deliveries chan []byte
	stop       chan struct{}
	wg         sync.WaitGroup
	once       sync.Once
}

// fakePending is stamped when its confirm is made, as a real stream's
// out-of-order confirms are.
type fakePending struct {
	done    chan struct{}
	arrived time.Time
	err     error
}

// fakeUnordered is a fakePending of a stream over several queues.
type fakeUnordered struct{ *fakePending }

func (fakeUnordered) unordered() {}

func (p *fakePending) Wait(ctx context.Context) (time.Time, error) {
	select {
	case <-p.done:
		return p.arrived, p.err
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}

func (s *fakeStream) Publish(p int, body []byte) (Pending, error) {
	pend := &fakePending{done: make(chan struct{})}
	var out Pending = pend
	if s.t.queues > 1 {
		out = fakeUnordered{pend}
	}
	if s.t.published != nil {
		s.t.published.Add(1)
	}
	_, idx, _ := DecodeBody(body)
	if s.t.refuse != nil && s.t.refuse(idx) {
		pend.arrived, pend.err = time.Now(), errRefused
		close(pend.done)
		return out, nil
	}
	delay := s.t.confirmDelay
	if s.t.slow != nil {
		delay += s.t.slow(idx)
	}
	time.AfterFunc(delay, func() {
		pend.arrived = time.Now()
		close(pend.done)
		s.deliveries <- body
	})
	return out, nil
}

func (s *fakeStream) Queues() int { return max(1, s.t.queues) }

func (s *fakeStream) Consume(ctx context.Context, deliver func(body []byte, received, arrived time.Time)) error {
	s.wg.Go(func() {
		for {
			select {
			case b := <-s.deliveries:
				deliver(b, time.Time{}, time.Now())
			case <-s.stop:
				return
			}
		}
	})
	return nil
}

func (s *fakeStream) Close() error {
	s.once.Do(func() { close(s.stop) })
	s.wg.Wait()
	return nil
}
