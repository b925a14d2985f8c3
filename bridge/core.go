package bridge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

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
// its queue, one at a time in arrival order, until ctx ends; then it
// drains the subscription (drainCore).
func (b *Bridge) runCore(ctx context.Context, nc *nats.Conn, fc *client.Client, in *Ingest) error {
	// Publishes outlive ctx by up to DrainTimeout: drainCore publishes
	// what NATS delivered before the stop, and abandons the rest.
	pubCtx, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()
	var draining atomic.Bool
	emptied := make(chan struct{}, 1) // a handler saw the buffer empty while draining
	handle := func(m *nats.Msg) {
		b.ingestCore(pubCtx, fc, in, m)
		if draining.Load() {
			// Pending counts the message being handled until this returns.
			if n, _, err := m.Sub.Pending(); err != nil || n <= 1 {
				select {
				case emptied <- struct{}{}:
				default:
				}
			}
		}
	}
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
	// nats.go calls the closed handler once its delivery goroutine has
	// returned from the last handler call.
	finished := make(chan struct{})
	var once sync.Once
	sub.SetClosedHandler(func(string) { once.Do(func() { close(finished) }) })
	if err := sub.SetPendingLimits(corePendingMsgs, corePendingBytes); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("bridge %s: subscribe %s: %w", b.opts.Name, in.Subject, err)
	}
	if nc.IsConnected() {
		_ = nc.Flush()
	}
	b.markStarted()
	<-ctx.Done()
	draining.Store(true)
	b.drainCore(nc, in, sub, finished, emptied, abandon)
	return nil
}

// drainCore ends a core subscription when the bridge stops: NATS sends it
// nothing more, and what it delivered before is still published, for up
// to DrainTimeout. Past that the publishes are abandoned (each message
// left counted as a "shutdown" drop) and the subscription is closed. It
// returns once no handler runs any more.
func (b *Bridge) drainCore(nc *nats.Conn, in *Ingest, sub *nats.Subscription, finished, emptied <-chan struct{}, abandon func()) {
	if err := sub.Drain(); err != nil {
		// Only a closed connection refuses a drain, and it has ended the
		// subscription already.
		b.log.Warn("cannot drain core subscription", "subject", in.Subject, "err", err)
		_ = sub.Unsubscribe()
		<-finished
		return
	}
	// nats.go closes a drained subscription after a round trip to the
	// server, which waits for a reconnect while NATS is unreachable; then
	// nothing more can arrive, and the subscription is closed here once
	// its buffer is empty. busy is how many of the pending messages are
	// known to be handled already (the one whose handler signalled).
	closeIfIdle := func(busy int) bool {
		if nc.IsConnected() {
			return false
		}
		if n, _, err := sub.Pending(); err == nil && n > busy {
			return false
		}
		_ = sub.Unsubscribe()
		<-finished
		return true
	}
	if closeIfIdle(0) {
		return
	}
	timer := time.NewTimer(b.opts.DrainTimeout)
	defer timer.Stop()
	for wait := true; wait; {
		select {
		case <-finished:
			return
		case <-emptied:
			if closeIfIdle(1) {
				return
			}
		case <-timer.C:
			wait = false
		}
	}
	left, _, _ := sub.Pending()
	b.log.Warn("core ingest drain timed out, dropping what is left", "subject", in.Subject, "left", left, "drain_timeout", b.opts.DrainTimeout)
	abandon()
	// The handlers now fail at once, each counting its drop; once the
	// buffer is empty the subscription is closed without waiting for the
	// server's round trip.
	select {
	case <-emptied:
	default:
	}
	if n, _, err := sub.Pending(); err == nil && n > 0 {
		select {
		case <-emptied:
		case <-finished:
		}
	}
	_ = sub.Unsubscribe()
	<-finished
}

// ingestCore publishes one core message. It retries while the Fibril
// connection is down and drops the message only when the broker refuses
// it (or ctx ends: a stop's drain ran out of DrainTimeout).
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
