package bridge

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/fibril-edge/fibril/appliance/client"
)

// Pending limits of a core subscription: what nats.go buffers while the
// bridge waits for Fibril before it reports a slow consumer.
const (
	corePendingMsgs  = 1 << 20
	corePendingBytes = 512 << 20
)

// runCore subscribes to the ingest's subject and publishes each message to
// its queue, one at a time in arrival order, until ctx ends.
func (b *Bridge) runCore(ctx context.Context, nc *nats.Conn, fc *client.Client, in *Ingest) error {
	handle := func(m *nats.Msg) { b.ingestCore(ctx, fc, in, m) }
	var sub *nats.Subscription
	var err error
	if in.QueueGroup != "" {
		sub, err = nc.QueueSubscribe(in.Subject, in.QueueGroup, handle)
	} else {
		sub, err = nc.Subscribe(in.Subject, handle)
	}
	if err != nil {
		return fmt.Errorf("bridge %s: subscribe %s: %w", b.opts.Name, in.Subject, err)
	}
	if err := sub.SetPendingLimits(corePendingMsgs, corePendingBytes); err != nil {
		return fmt.Errorf("bridge %s: subscribe %s: %w", b.opts.Name, in.Subject, err)
	}
	if nc.IsConnected() {
		_ = nc.Flush()
	}
	b.markStarted()
	<-ctx.Done()
	// Drain lets the handler finish what nats.go already buffered; with
	// ctx done those publishes fail fast and count as "shutdown" drops.
	_ = sub.Unsubscribe()
	return nil
}

// ingestCore publishes one core message. It retries while the Fibril
// connection is down and drops the message only when the broker refuses
// it (or the bridge stops).
func (b *Bridge) ingestCore(ctx context.Context, fc *client.Client, in *Ingest, m *nats.Msg) {
	b.st.update(func(s *Stats) { s.Received++ })
	queue := in.queueFor(m.Subject)
	if queue == "" {
		b.st.drop("no_queue")
		b.log.Warn("no queue for subject, dropped", "subject", m.Subject)
		return
	}
	msg := client.Message{ID: m.Header.Get(nats.MsgIdHdr), Headers: fibrilHeaders(m.Subject, m.Header), Body: m.Data}
	for attempt := 0; ; attempt++ {
		cf, err := fc.Publish(ctx, queue, msg)
		if err == nil {
			b.st.update(func(s *Stats) {
				s.Published++
				if cf.Duplicate {
					s.Duplicates++
				}
			})
			b.noteQueue(queue, "core ingest", nil)
			return
		}
		if ctx.Err() != nil {
			b.st.drop("shutdown")
			return
		}
		// A lost connection (even one the broker closed with an error) and
		// a broker that is shutting down or failing over are retried, not
		// dropped: only a refusal of this message is a drop.
		retry := errors.Is(err, client.ErrConnectionLost) || errors.Is(err, client.ErrNotConnected) ||
			errors.Is(err, client.ErrUnavailable)
		var ce *client.Error
		if !retry && errors.As(err, &ce) {
			reason := ce.Code.String()
			b.st.drop(reason)
			b.noteQueue(queue, "core ingest", err)
			b.st.update(func(s *Stats) { s.LastError = "fibril: " + err.Error() })
			b.log.Warn("queue refused message, dropped", "queue", queue, "subject", m.Subject, "reason", reason, "err", err)
			return
		}
		if !client.IsRetryable(err) {
			b.st.drop("error")
			b.log.Error("publish failed, dropped", "queue", queue, "subject", m.Subject, "err", err)
			return
		}
		b.st.update(func(s *Stats) { s.Retries++; s.LastError = "fibril: " + err.Error() })
		if !sleep(ctx, backoff(b.opts.RetryBackoff, b.opts.MaxRetryBackoff, attempt)) {
			b.st.drop("shutdown")
			return
		}
	}
}
