package e2ebench

import (
	"context"
	"errors"
	"sync"
	"time"
)

// fakeTarget is an in-memory broker: a publish is confirmed after
// confirmDelay and delivered right after its confirm, unless refuse says
// to refuse it (failed at once, never delivered).
type fakeTarget struct {
	confirmDelay time.Duration
	refuse       func(index int) bool
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

type fakePending struct {
	done chan struct{}
	err  error
}

func (p fakePending) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *fakeStream) Publish(p int, body []byte) (Pending, error) {
	pend := fakePending{done: make(chan struct{})}
	if _, idx, _ := DecodeBody(body); s.t.refuse != nil && s.t.refuse(idx) {
		pend.err = errRefused
		close(pend.done)
		return pend, nil
	}
	time.AfterFunc(s.t.confirmDelay, func() {
		close(pend.done)
		s.deliveries <- body
	})
	return pend, nil
}

func (s *fakeStream) Consume(ctx context.Context, deliver func([]byte, time.Time)) error {
	s.wg.Go(func() {
		for {
			select {
			case b := <-s.deliveries:
				deliver(b, time.Time{})
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
