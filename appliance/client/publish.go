package client

import (
	"context"
	"fmt"
	"sync"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// Header is one message header: Key is UTF-8 text, Value any bytes. A
// message's headers keep their order, and keys may repeat.
type Header = wire.Header

// Message is what Publish sends.
type Message struct {
	// ID identifies the message for the queue's dedupe window: a publish
	// with an ID stored within the window is confirmed as a Duplicate and
	// not stored again. Set it to retry a publish safely. "" for none.
	ID string
	// Key picks the partition: equal keys go to the same partition, in
	// publish order. "" lets the broker pick.
	Key     string
	Headers []Header
	// Body is the payload. The client does not copy it: leave it unchanged
	// until the publish is answered.
	Body []byte
}

// Confirm says a message is stored at the queue's durability: handed to
// the operating system for a buffered queue, synced to disk for a durable
// one.
type Confirm struct {
	Partition int    // the partition it went to, from 0
	Offset    uint64 // its offset in that partition's log
	// Duplicate: the ID was already stored within the dedupe window;
	// Partition and Offset are the original's and nothing new was stored.
	Duplicate bool
	// Durability is the promise this confirm carries: Durable, synced by
	// every required copy; Buffered, written. A queue's mode can change
	// (Client.SetMode), so it is this publish's, not the queue's. Zero
	// (unspecified) from a broker older than protocol version 4.
	Durability Durability
}

// Future is the answer to a PublishAsync, available once Done is closed.
// Every Future completes: with the Confirm, with the broker's error, or
// with ErrConnectionLost or ErrClosed when the connection ends first.
type Future struct {
	done    chan struct{}
	confirm Confirm
	err     error
	cn      *conn // the connection it went out on; nil if nothing was sent
}

// Done is closed when the publish is answered.
func (f *Future) Done() <-chan struct{} { return f.done }

// Wait waits for the answer or for ctx to end. Ending ctx does not cancel
// the publish.
func (f *Future) Wait(ctx context.Context) (Confirm, error) {
	select {
	case <-f.done:
		return f.confirm, f.err
	case <-ctx.Done():
		return Confirm{}, ctx.Err()
	}
}

// Result waits for the answer (every Future completes) and returns it.
// After Done is closed it returns at once.
func (f *Future) Result() (Confirm, error) {
	<-f.done
	return f.confirm, f.err
}

func (f *Future) complete(c Confirm, err error) {
	f.confirm, f.err = c, err
	close(f.done)
}

func failedFuture(err error) *Future {
	f := &Future{done: make(chan struct{})}
	f.complete(Confirm{}, err)
	return f
}

// Publish sends m to queue and waits for its Confirm. Confirms come
// pipelined: many publishes from many goroutines share the connection
// without waiting for each other.
//
// While the client is reconnecting, Publish waits for the connection until
// ctx ends. If ctx ends, or the connection is lost (ErrConnectionLost),
// after the message was sent, it may or may not be stored: publish it
// again with the same Message.ID, and the queue's dedupe window makes a
// repeat harmless. Broker refusals are *Error values: ErrNotFound (no such
// queue), ErrQueueFull, ErrDiskFull, ErrUnavailable (worth retrying, see
// IsRetryable), ErrTooLarge, ErrBadRequest.
func (c *Client) Publish(ctx context.Context, queue string, m Message) (Confirm, error) {
	f, err := c.publish(ctx, true, queue, m)
	if err != nil {
		return Confirm{}, err
	}
	cf, err := f.Wait(ctx)
	if err != nil {
		return Confirm{}, err
	}
	return cf, nil
}

// PublishAsync sends m to queue and returns at once with a Future for its
// Confirm. Use it to keep many publishes in flight from one goroutine;
// confirms for one partition come in publish order.
//
// PublishAsync waits only while Options.MaxInFlight publishes are
// unanswered. It does not wait for a connection: while the client is
// reconnecting the Future fails at once with ErrNotConnected (nothing was
// sent). The Future fails with ErrConnectionLost if the connection ends
// before the Confirm; as with Publish, the message may or may not be
// stored then, and a retry with the same Message.ID is safe.
func (c *Client) PublishAsync(queue string, m Message) *Future {
	f, err := c.publish(context.Background(), false, queue, m)
	if err != nil {
		return failedFuture(err)
	}
	return f
}

// PublishAsyncContext is PublishAsync that waits, until ctx ends, for an
// in-flight slot and for a connection while the client reconnects,
// instead of failing at once. It returns once the publish is sent, so
// publishes made one after the other from one goroutine go out, and are
// confirmed per partition, in that order. If ctx ends first the Future
// fails with ctx's error and nothing was sent.
func (c *Client) PublishAsyncContext(ctx context.Context, queue string, m Message) *Future {
	f, err := c.publish(ctx, true, queue, m)
	if err != nil {
		return failedFuture(err)
	}
	return f
}

// PublishAsyncAfter is PublishAsyncContext for a pipeline that must keep
// its order across a lost connection: m goes out only on the connection
// that prev went out on, right behind it. If that connection is gone (or
// prev was never sent) nothing is sent and the Future fails with
// ErrConnectionLost (ErrNotConnected while the client reconnects), so a
// publisher that resends from its first unconfirmed message never has a
// later message stored ahead of an earlier one. A nil prev is
// PublishAsyncContext.
func (c *Client) PublishAsyncAfter(ctx context.Context, prev *Future, queue string, m Message) *Future {
	if prev == nil {
		return c.PublishAsyncContext(ctx, queue, m)
	}
	f, err := c.publishOn(ctx, prev.cn, queue, m)
	if err != nil {
		return failedFuture(err)
	}
	return f
}

// publish is publishVia on whichever connection the client has.
func (c *Client) publish(ctx context.Context, wait bool, queue string, m Message) (*Future, error) {
	return c.publishVia(ctx, wait, nil, queue, m)
}

// publishOn is publish on the connection pin only: ErrConnectionLost when
// pin is nil or no longer the client's connection.
func (c *Client) publishOn(ctx context.Context, pin *conn, queue string, m Message) (*Future, error) {
	if pin == nil {
		return nil, fmt.Errorf("client: publish to %s: %w (the publish it follows was never sent)", queue, ErrConnectionLost)
	}
	return c.publishVia(ctx, false, pin, queue, m)
}

// publishVia validates m, takes an in-flight slot and sends the Publish,
// on pin only when it is set. The Future it returns completes when the
// publish is answered; an error means nothing was sent.
func (c *Client) publishVia(ctx context.Context, wait bool, pin *conn, queue string, m Message) (*Future, error) {
	p := &wire.Publish{Queue: queue, MessageID: m.ID, Key: m.Key, Headers: m.Headers, Body: m.Body}
	if queue == "" {
		return nil, fmt.Errorf("%w publish: empty queue name", ErrInvalid)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%w publish to %s: %w", ErrInvalid, queue, err)
	}
	select {
	case c.inflight <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("client: publish to %s: %w (waiting for an in-flight slot)", queue, ctx.Err())
	case <-c.closing:
		return nil, fmt.Errorf("client: publish to %s: %w", queue, ErrClosed)
	}
	f := &Future{done: make(chan struct{})}
	c.pubs.add()
	err := c.send(ctx, wait, p, &p.Corr, func(cn *conn) error {
		if pin != nil && cn != pin {
			return fmt.Errorf("%w (the publish it follows went out on an earlier connection)", ErrConnectionLost)
		}
		f.cn = cn
		if n := wire.DeliverLen(p); n > cn.maxFrame {
			return &Error{Code: wire.CodeTooLarge,
				Message: fmt.Sprintf("message of %d bytes as a delivery exceeds the broker's frame limit of %d", n, cn.maxFrame)}
		}
		return nil
	}, func(fr wire.Frame, err error) {
		<-c.inflight
		defer c.pubs.done()
		if err != nil {
			f.complete(Confirm{}, fmt.Errorf("client: publish to %s: %w", queue, err))
			return
		}
		cf, ok := fr.(*wire.Confirm)
		if !ok {
			f.complete(Confirm{}, fmt.Errorf("client: publish to %s: unexpected answer %s", queue, fr.Type()))
			return
		}
		f.complete(Confirm{Partition: int(cf.Partition), Offset: cf.Offset, Duplicate: cf.Duplicate, Durability: cf.Durability}, nil)
	})
	if err != nil {
		<-c.inflight
		c.pubs.done()
		return nil, fmt.Errorf("client: publish to %s: %w", queue, err)
	}
	return f, nil
}

// Flush waits until every publish sent before it (PublishAsync and the
// others) has been answered, confirmed or failed, or until ctx ends. It
// says nothing of how they went: their Futures do. Publishes sent while
// it waits are waited for too.
func (c *Client) Flush(ctx context.Context) error {
	select {
	case <-c.pubs.idle():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("client: flush: %w", ctx.Err())
	}
}

// outstanding counts the publishes sent and not answered yet.
type outstanding struct {
	mu   sync.Mutex // guards the fields below
	n    int
	none chan struct{} // closed while n is 0
}

func newOutstanding() *outstanding {
	o := &outstanding{none: make(chan struct{})}
	close(o.none)
	return o
}

func (o *outstanding) add() {
	o.mu.Lock()
	if o.n == 0 {
		o.none = make(chan struct{})
	}
	o.n++
	o.mu.Unlock()
}

func (o *outstanding) done() {
	o.mu.Lock()
	o.n--
	if o.n == 0 {
		close(o.none)
	}
	o.mu.Unlock()
}

// idle is closed once no publish is outstanding.
func (o *outstanding) idle() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.none
}
