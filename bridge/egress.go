package bridge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fibril-edge/fibril/appliance/client"
)

// egressTimeout bounds how long one publish waits for NATS to accept it
// before it is tried again.
const egressTimeout = 5 * time.Second

// errNoStream: JetStream answers, and no stream takes the egress's subject.
var errNoStream = errors.New("no stream for the subject")

// runEgress consumes the egress's queue and publishes each delivery to
// NATS, in the order taken; the Fibril ack follows NATS's acceptance. While
// NATS does not answer, the delivery is held (and the leases of all it
// holds kept alive) and sent again until NATS takes it: an outage is not
// the message's fault and uses up none of its deliveries. Only a message
// NATS refuses (refused) is released for redelivery.
func (b *Bridge) runEgress(ctx context.Context, nc *nats.Conn, fc *client.Client, eg *Egress) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("bridge %s: jetstream: %w", b.opts.Name, err)
	}
	es := &egressSender{b: b, nc: nc, js: js, eg: eg}
	for started := false; ; started = true {
		h := newEgressHold(eg.Prefetch)
		var cons *client.Consumer
		for attempt := 0; ; attempt++ {
			cons, err = fc.Subscribe(ctx, eg.Queue, client.SubscribeOptions{Prefetch: eg.Prefetch, ManualAck: true, Handler: h.take})
			b.noteQueue(eg.Queue, "egress", err)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return nil
			}
			b.st.update(func(s *Stats) { s.LastError = fmt.Sprintf("egress subscribe %s: %v", eg.Queue, err) })
			b.log.Warn("cannot subscribe egress queue, retrying", "queue", eg.Queue, "err", err)
			if !sleep(ctx, backoff(b.opts.RetryBackoff, b.opts.MaxRetryBackoff, attempt)) {
				return nil
			}
		}
		if !started {
			b.markStarted()
		}
		es.run(ctx, cons, h)
		if ctx.Err() != nil {
			// What it holds unsettled the broker releases for redelivery.
			if err := cons.Close(); err != nil {
				return fmt.Errorf("bridge %s: egress %s: close consumer: %w", b.opts.Name, eg.Queue, err)
			}
			return nil
		}
		err := cons.Err()
		b.noteQueue(eg.Queue, "egress", err)
		b.st.update(func(s *Stats) { s.LastError = fmt.Sprintf("egress consumer %s ended: %v", eg.Queue, err) })
		b.log.Error("egress consumer ended, subscribing again", "queue", eg.Queue, "err", err)
		_ = cons.Close()
		// The queue deleted, or moved: not at once, so that a consumer
		// that ends as soon as it starts is not subscribed in a loop.
		if !sleep(ctx, b.opts.RetryBackoff) {
			return nil
		}
	}
}

// egressHold is what one subscription of an egress holds: the deliveries
// taken from Fibril and not settled yet, queued in the order taken, whose
// leases it keeps alive.
type egressHold struct {
	wake chan struct{} // cap 1: queue has deliveries

	mu    sync.Mutex
	queue []*client.Delivery
	held  map[*client.Delivery]struct{}
}

func newEgressHold(prefetch int) *egressHold {
	return &egressHold{wake: make(chan struct{}, 1), held: make(map[*client.Delivery]struct{})}
}

// take never blocks: every delivery the client hands over is held (and its
// lease kept) at once, however many a reconnect brings.
func (h *egressHold) take(ctx context.Context, d *client.Delivery) error {
	h.mu.Lock()
	h.held[d] = struct{}{}
	h.queue = append(h.queue, d)
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
	return nil
}

func (h *egressHold) next() (*client.Delivery, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.queue) == 0 {
		return nil, false
	}
	d := h.queue[0]
	h.queue[0] = nil
	h.queue = h.queue[1:]
	return d, true
}

// release forgets d: settled, or taken back by the broker.
func (h *egressHold) release(d *client.Delivery) {
	h.mu.Lock()
	delete(h.held, d)
	h.mu.Unlock()
}

func (h *egressHold) holds(d *client.Delivery) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.held[d]
	return ok
}

func (h *egressHold) all() []*client.Delivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*client.Delivery, 0, len(h.held))
	for d := range h.held {
		out = append(out, d)
	}
	return out
}

// keepLeases extends the lease of every delivery h holds, every
// eg.ExtendEvery, until ctx ends: a lease that ran out would count as a
// delivery, and past the queue's MaxDeliveries the broker dead-letters the
// message. A delivery whose connection was lost is forgotten (the broker
// delivers it again).
func (b *Bridge) keepLeases(ctx context.Context, eg *Egress, h *egressHold) {
	t := time.NewTicker(eg.ExtendEvery)
	defer t.Stop()
	warned := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, d := range h.all() {
			err := d.InProgress()
			switch {
			case errors.Is(err, client.ErrStaleDelivery) || errors.Is(err, client.ErrAlreadySettled):
				h.release(d)
			case errors.Is(err, client.ErrInvalid) && !warned:
				warned = true
				b.log.Warn("the broker cannot extend leases; held egress messages are redelivered after the queue's ack deadline", "queue", eg.Queue, "err", err)
			}
		}
	}
}

// egressSender publishes one egress's deliveries; used by runEgress's
// goroutine only.
type egressSender struct {
	b  *Bridge
	nc *nats.Conn
	js jetstream.JetStream
	eg *Egress

	refusals int       // consecutive messages NATS refused
	down     time.Time // since when NATS has not answered; zero while it does
}

// run sends the deliveries h takes, in order, until ctx ends or the
// consumer does, keeping the leases of all h holds alive meanwhile.
func (es *egressSender) run(ctx context.Context, cons *client.Consumer, h *egressHold) {
	keepCtx, stopKeep := context.WithCancel(ctx)
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		es.b.keepLeases(keepCtx, es.eg, h)
	}()
	defer func() {
		stopKeep()
		<-kept
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-cons.Done():
			return
		case <-h.wake:
			for {
				d, ok := h.next()
				if !ok || ctx.Err() != nil {
					break
				}
				es.send(ctx, h, d)
			}
		}
	}
}

// send publishes d until NATS accepts it (then acks it), NATS refuses it
// (then releases it for redelivery, which counts toward the queue's
// MaxDeliveries), the broker takes it back, or ctx ends.
func (es *egressSender) send(ctx context.Context, h *egressHold, d *client.Delivery) {
	b, eg := es.b, es.eg
	for attempt := 0; ; attempt++ {
		// A delivery whose connection or subscription is gone is the
		// broker's again (it delivers it anew): sending it would only
		// duplicate it, and out of order.
		if d.Stale() {
			h.release(d)
			return
		}
		err := b.egressOne(ctx, es.nc, es.js, eg, d)
		if err == nil {
			h.release(d)
			acked := true
			if err := d.Ack(); err != nil {
				// Its connection was lost: the broker delivers it again,
				// and a stream's duplicate window drops the repeat.
				b.log.Debug("egress ack not sent", "queue", eg.Queue, "err", err)
				acked = false
			}
			es.refusals = 0
			if !es.down.IsZero() {
				b.log.Info("nats accepts egress messages again", "queue", eg.Queue, "subject", eg.Subject, "held_for", time.Since(es.down).Round(time.Millisecond))
				es.down = time.Time{}
			}
			if acked {
				b.st.update(func(s *Stats) { s.Egressed++ })
			}
			return
		}
		if ctx.Err() != nil {
			return // stopping: the consumer's close releases it
		}
		b.st.update(func(s *Stats) { s.LastError = "egress: " + err.Error() })
		if refused(err) {
			h.release(d)
			es.release(ctx, d, err)
			return
		}
		if !h.holds(d) {
			return // its connection was lost: the broker delivers it again
		}
		if es.down.IsZero() {
			es.down = time.Now()
			b.log.Warn("nats does not accept egress messages, holding them until it does", "queue", eg.Queue, "subject", eg.Subject, "err", err)
		}
		b.log.Debug("egress delivery held, sending it again", "queue", eg.Queue, "attempt", attempt+1, "err", err)
		if !sleep(ctx, backoff(b.opts.RetryBackoff, b.opts.MaxRetryBackoff, attempt)) {
			return
		}
	}
}

// release hands a message NATS refused back to the broker for
// redelivery, after a backoff over consecutive refusals so that a message
// refused every time does not run through its deliveries at once.
func (es *egressSender) release(ctx context.Context, d *client.Delivery, cause error) {
	b, eg := es.b, es.eg
	b.st.update(func(s *Stats) { s.EgressFailed++ })
	if es.refusals == 0 {
		b.log.Warn("nats refused egress message, released for redelivery", "queue", eg.Queue, "subject", eg.Subject, "deliveries", d.Deliveries, "err", cause)
	}
	delay := backoff(b.opts.RetryBackoff, b.opts.MaxRetryBackoff, es.refusals)
	es.refusals++
	err := d.NackDelay(delay)
	if errors.Is(err, client.ErrInvalid) { // a broker without delayed requeues
		sleep(ctx, delay)
		err = d.Requeue()
	}
	if err != nil {
		b.log.Debug("egress release not sent", "queue", eg.Queue, "err", err)
	}
}

// refused reports whether NATS refused the message itself, so that sending
// it again as it is cannot succeed: too large for the server, or rejected
// by the stream for what the message is or says (its size, its headers,
// an expectation its headers state, a TTL it asks for). The stream's
// answer is told by its error code, not its status: a full account, a
// sealed stream or missing limits also answer 400, and those are the
// state of NATS. Anything else (not connected, no answer in time,
// JetStream unavailable, a full stream, no stream for the subject yet) is
// held until NATS takes the message.
func refused(err error) bool {
	if errors.Is(err, nats.ErrMaxPayload) {
		return true
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case jetstream.JSErrCodeStreamMessageExceedsMaximum,
		10097, // JSStreamHeaderExceedsMaximumErr: headers over 64 KiB
		10060, // JSStreamNotMatchErr: Nats-Expected-Stream names another
		10070, // JSStreamWrongLastMsgIDErr: Nats-Expected-Last-Msg-Id
		jetstream.JSErrCodeStreamWrongLastSequence,
		jetstream.JSErrCodeStreamWrongLastSequenceConstant,
		10165, // JSMessageTTLInvalidErr: Nats-TTL
		10193: // JSStreamExpectedLastSeqPerSubjectInvalid
		return true
	}
	return false
}

// egressOne publishes one delivery and returns once NATS accepted it: the
// stream's publish ack, or for core NATS a flush round trip.
func (b *Bridge) egressOne(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, eg *Egress, d *client.Delivery) error {
	m := nats.NewMsg(eg.Subject)
	m.Data = d.Body
	for _, h := range d.Headers {
		if h.Key == SubjectHeader {
			continue
		}
		m.Header.Add(h.Key, h.Value)
	}
	// A Nats-Msg-Id lets the stream's duplicate window drop a repeat
	// after a redelivery; without a Fibril id the message's position
	// stands for it.
	if m.Header.Get(nats.MsgIdHdr) == "" {
		id := d.ID
		if id == "" {
			id = fmt.Sprintf("fibril:%s:%d:%d", d.Queue, d.Partition, d.Offset)
		}
		m.Header.Set(nats.MsgIdHdr, id)
	}
	// Not into nats.go's reconnect buffer: the message is held and sent
	// again once NATS is back.
	if !nc.IsConnected() {
		return fmt.Errorf("publish to %s: %w", eg.Subject, nats.ErrDisconnected)
	}
	ctx, cancel := context.WithTimeout(ctx, egressTimeout)
	defer cancel()
	if eg.JetStream {
		_, err := js.PublishMsg(ctx, m)
		if errors.Is(err, jetstream.ErrNoStreamResponse) {
			// No responders: either no stream takes the subject or
			// JetStream is not there; only JetStream itself can say which.
			if _, serr := js.StreamNameBySubject(ctx, eg.Subject); errors.Is(serr, jetstream.ErrStreamNotFound) {
				err = errNoStream
			}
		}
		if err != nil {
			return fmt.Errorf("jetstream publish to %s: %w", eg.Subject, err)
		}
		return nil
	}
	if err := nc.PublishMsg(m); err != nil {
		return fmt.Errorf("publish to %s: %w", eg.Subject, err)
	}
	if err := nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("flush after publish to %s: %w", eg.Subject, err)
	}
	return nil
}
