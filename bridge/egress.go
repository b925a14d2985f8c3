package bridge

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fibril-edge/fibril/appliance/client"
)

// egressTimeout bounds how long one delivery waits for NATS to accept it
// before it is released for redelivery.
const egressTimeout = 5 * time.Second

// runEgress consumes the egress's queue and publishes each delivery to
// NATS; the Fibril ack follows NATS's acceptance, a failure releases the
// delivery (nack with requeue) after a backoff.
func (b *Bridge) runEgress(ctx context.Context, nc *nats.Conn, fc *client.Client, eg *Egress) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("bridge %s: jetstream: %w", b.opts.Name, err)
	}
	failures := 0 // consecutive, touched by the handler goroutine only (Concurrency 1)
	handler := func(hctx context.Context, d *client.Delivery) error {
		err := b.egressOne(hctx, nc, js, eg, d)
		if err == nil {
			failures = 0
			b.st.update(func(s *Stats) { s.Egressed++ })
			return nil
		}
		b.st.update(func(s *Stats) { s.EgressFailed++; s.LastError = "egress: " + err.Error() })
		if failures == 0 {
			b.log.Warn("nats did not accept egress message, released for redelivery", "queue", eg.Queue, "subject", eg.Subject, "err", err)
		}
		// Hold the delivery a while before releasing it, so that an
		// unreachable NATS is not hammered by the same message.
		sleep(hctx, backoff(b.opts.RetryBackoff, b.opts.MaxRetryBackoff, failures))
		failures++
		return err
	}
	for started := false; ; started = true {
		var cons *client.Consumer
		for attempt := 0; ; attempt++ {
			cons, err = fc.Subscribe(ctx, eg.Queue, client.SubscribeOptions{Prefetch: eg.Prefetch, Handler: handler})
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
		select {
		case <-ctx.Done():
			return cons.Close()
		case <-cons.Done():
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
	ctx, cancel := context.WithTimeout(ctx, egressTimeout)
	defer cancel()
	if eg.JetStream {
		_, err := js.PublishMsg(ctx, m)
		return err
	}
	if !nc.IsConnected() {
		return nats.ErrConnectionClosed
	}
	if err := nc.PublishMsg(m); err != nil {
		return err
	}
	return nc.FlushWithContext(ctx)
}
