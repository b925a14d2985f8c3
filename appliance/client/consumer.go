package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"sync"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// SubscribeOptions configure Subscribe. The zero value of every field but
// Handler means its default.
type SubscribeOptions struct {
	// Prefetch is the most deliveries the broker leaves unsettled with this
	// consumer; it sends the next one as one is settled. Default (0): the
	// broker's default window (100 on this broker).
	Prefetch int
	// Handler is called for each delivery, in delivery order when
	// Concurrency is 1 (so in offset order within a partition). Unless
	// ManualAck is set, its return value settles the delivery: nil acks
	// it, an error matching ErrDiscard nacks it without requeue (discard,
	// or dead-letter if the queue has a dead-letter queue), and any other
	// error nacks it with requeue (the broker redelivers it, Deliveries
	// one higher). A handler may settle a delivery itself with Ack or Nack;
	// its return value is then not used for settling. ctx is cancelled when
	// the Consumer or the Client is closed. Required.
	Handler func(ctx context.Context, d *Delivery) error
	// ManualAck leaves settling to the handler (and to code it hands
	// deliveries to): the client never acks or nacks by itself, and a
	// handler error is only reported to OnError. Unsettled deliveries count
	// against Prefetch until their ack deadline passes. (This is the
	// AutoAck=false of other clients.)
	ManualAck bool
	// Concurrency is how many handler calls may run at once. Default 1.
	// Above 1, deliveries are no longer handled in order.
	Concurrency int
	// OnError receives errors nobody else sees: settles the broker
	// refused (a SettleError, e.g. a tag whose lease had expired), settles
	// of stale deliveries in automatic mode, handler errors with ManualAck,
	// and failures to re-subscribe after a reconnect. It runs on the
	// client's goroutines and must return quickly. Default: log them
	// (stale deliveries at debug level).
	OnError func(error)
}

type subState uint8

const (
	subPending subState = iota // the first Subscribe is in flight
	subActive                  // subscribed at least once; re-subscribed after reconnects
	subClosed
)

// Consumer is a subscription to a queue: deliveries go to a handler
// (Subscribe) or a channel (Consume). After a reconnect the client
// subscribes again under the same Consumer; deliveries received on the old
// connection are stale then (their Ack and Nack return ErrStaleDelivery
// and the broker redelivers their messages). Close ends it.
type Consumer struct {
	c           *Client
	id          uint32
	queue       string
	prefetch    uint32
	handler     func(context.Context, *Delivery) error
	manual      bool
	concurrency int
	onError     func(error)
	msgs        chan *Delivery // channel mode only
	hctx        context.Context
	hcancel     context.CancelFunc
	wake        chan struct{} // cap 1: buf has deliveries
	stop        chan struct{} // closed: hand out no more deliveries
	stopped     chan struct{} // closed when the dispatch goroutines have exited
	done        chan struct{} // closed when the Consumer has ended
	once        sync.Once
	haltOnce    sync.Once // closes stop and cancels the handlers' context

	mu          sync.Mutex // guards the fields below
	state       subState
	conn        *conn       // the connection it is subscribed on; nil while re-subscribing
	subscribing bool        // a re-subscribe is in flight
	buf         []*Delivery // received, not yet handed out
	partitions  int
	err         error
	retry       *time.Timer
	attempt     int
	gen         uint64 // subscriptions the broker ended by itself (brokerEnded)
}

// Subscribe starts a consumer that calls opts.Handler for each delivery
// from queue (see SubscribeOptions for how its result settles the
// delivery). ctx bounds the subscribe itself (waiting for a connection
// while the client reconnects included), not the consumer's life: it runs
// until Close. The queue must exist (ErrNotFound).
func (c *Client) Subscribe(ctx context.Context, queue string, opts SubscribeOptions) (*Consumer, error) {
	if opts.Handler == nil {
		return nil, fmt.Errorf("%w subscribe to %s: no Handler (use Consume for a channel)", ErrInvalid, queue)
	}
	return c.subscribe(ctx, queue, opts)
}

// Consume starts a consumer whose deliveries arrive on Messages, at most
// prefetch of them unsettled at a time (0: the broker's default, 100 on
// this broker). Settle each with Delivery.Ack or Delivery.Nack. ctx bounds
// the subscribe itself, not the consumer's life: it runs until Close,
// which also closes Messages.
func (c *Client) Consume(ctx context.Context, queue string, prefetch int) (*Consumer, error) {
	return c.subscribe(ctx, queue, SubscribeOptions{Prefetch: prefetch})
}

func (c *Client) subscribe(ctx context.Context, queue string, opts SubscribeOptions) (*Consumer, error) {
	switch {
	case queue == "":
		return nil, fmt.Errorf("%w subscribe: empty queue name", ErrInvalid)
	case opts.Prefetch < 0 || int64(opts.Prefetch) > math.MaxUint32:
		return nil, fmt.Errorf("%w subscribe to %s: prefetch %d", ErrInvalid, queue, opts.Prefetch)
	case opts.Concurrency < 0:
		return nil, fmt.Errorf("%w subscribe to %s: concurrency %d", ErrInvalid, queue, opts.Concurrency)
	}
	if err := ctx.Err(); err != nil {
		// Done already: nothing is sent. (Sent, the broker's answer and
		// the context's end could both be ready, and either be taken.)
		return nil, fmt.Errorf("client: subscribe to %s: %w", queue, err)
	}
	s := newConsumer(c, queue, opts)
	if err := s.subscribeFirst(ctx); err != nil {
		s.shutdown(err, true)
		return nil, fmt.Errorf("client: subscribe to %s: %w", queue, err)
	}
	return s, nil
}

func newConsumer(c *Client, queue string, opts SubscribeOptions) *Consumer {
	if opts.Concurrency == 0 {
		opts.Concurrency = 1
	}
	s := &Consumer{
		c:           c,
		id:          c.subID.Add(1),
		queue:       queue,
		prefetch:    uint32(opts.Prefetch),
		handler:     opts.Handler,
		manual:      opts.ManualAck,
		concurrency: opts.Concurrency,
		onError:     opts.OnError,
		wake:        make(chan struct{}, 1),
		stop:        make(chan struct{}),
		stopped:     make(chan struct{}),
		done:        make(chan struct{}),
	}
	s.hctx, s.hcancel = context.WithCancel(context.Background())
	if s.handler == nil {
		s.msgs = make(chan *Delivery)
		go s.pump()
	} else {
		var wg sync.WaitGroup
		for range s.concurrency {
			wg.Go(s.work)
		}
		go func() {
			wg.Wait()
			close(s.stopped)
		}()
	}
	return s
}

// Messages is the channel of deliveries of a Consumer from Consume; nil
// for one from Subscribe. It is closed when the Consumer ends.
func (s *Consumer) Messages() <-chan *Delivery { return s.msgs }

// Queue is the queue consumed.
func (s *Consumer) Queue() string { return s.queue }

// Partitions is how many partitions the subscription reads, as the broker
// reported when it last subscribed.
func (s *Consumer) Partitions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.partitions
}

// Done is closed when the Consumer has ended: after Close, Client.Close,
// or a failure to re-subscribe (see Err).
func (s *Consumer) Done() <-chan struct{} { return s.done }

// Err is why the Consumer ended by itself (say ErrNotFound when its queue
// was deleted while the client was reconnecting); nil while it runs and
// after Close.
func (s *Consumer) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the Consumer: it stops handing out deliveries, cancels the
// handlers' context and waits for running handlers, sends their settles,
// then unsubscribes (waiting up to Options.CloseTimeout), and the broker
// releases whatever is still unsettled for redelivery. Messages is closed.
//
// Called from a handler, Close cannot wait for the handler it runs in:
// it stops deliveries and cancels the handlers' context, returns, and the
// rest follows once the handlers have returned (Done closes then). No
// delivery is handed out after Close returns.
func (s *Consumer) Close() error {
	if calledFromHandler() {
		s.halt()
		go s.shutdown(nil, true)
		return nil
	}
	s.shutdown(nil, true)
	return nil
}

// halt stops handing out deliveries and cancels the handlers' context.
func (s *Consumer) halt() {
	s.haltOnce.Do(func() {
		close(s.stop)
		s.hcancel()
	})
}

// handleFunc is the name of the frame every handler runs under.
var handleFunc = runtime.FuncForPC(reflect.ValueOf((*Consumer).handle).Pointer()).Name()

// calledFromHandler reports whether the calling goroutine runs a
// Consumer's handler: Consumer.handle is on its stack.
func calledFromHandler() bool {
	pcs := make([]uintptr, 128)
	for {
		n := runtime.Callers(2, pcs)
		if n == len(pcs) && len(pcs) < 1<<16 {
			pcs = make([]uintptr, 2*len(pcs)) // a deep handler: look at all of it
			continue
		}
		frames := runtime.CallersFrames(pcs[:n])
		for {
			f, more := frames.Next()
			if f.Function == handleFunc {
				return true
			}
			if !more {
				return false
			}
		}
	}
}

// shutdown ends the Consumer once; later calls wait for the first.
func (s *Consumer) shutdown(cause error, unsubscribe bool) {
	s.once.Do(func() {
		s.halt()
		<-s.stopped
		s.mu.Lock()
		cn, active := s.conn, s.state == subActive
		s.state = subClosed
		s.conn, s.buf = nil, nil
		if cause != nil && !errors.Is(cause, ErrClosed) {
			s.err = cause
		}
		if s.retry != nil {
			s.retry.Stop()
		}
		s.mu.Unlock()
		if unsubscribe && active && cn != nil {
			s.unsubscribe(cn)
		}
		s.c.mu.Lock()
		delete(s.c.subs, s.id)
		s.c.mu.Unlock()
		close(s.done)
	})
	<-s.done
}

func (s *Consumer) unsubscribe(cn *conn) {
	ctx, cancel := context.WithTimeout(context.Background(), s.c.opts.CloseTimeout)
	defer cancel()
	u := &wire.Unsubscribe{SubID: s.id}
	ch := make(chan answer, 1)
	err := cn.request(ctx, u, &u.Corr, func(f wire.Frame, err error) { ch <- answer{f, err} })
	if err != nil {
		return // the connection is ending, and the subscription with it
	}
	select {
	case a := <-ch:
		if a.err != nil && !errors.Is(a.err, ErrConnectionLost) {
			s.report(fmt.Errorf("client: unsubscribe from %s: %w", s.queue, a.err))
		}
	case <-ctx.Done():
		s.report(fmt.Errorf("client: unsubscribe from %s: no answer within %v", s.queue, s.c.opts.CloseTimeout))
	}
}

func (s *Consumer) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == subClosed
}
