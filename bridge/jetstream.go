package bridge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fibril-edge/fibril/appliance/client"
)

// fetchWait bounds one pull; it is also how long Run may take to notice
// its context ended while the stream is idle.
const fetchWait = 500 * time.Millisecond

// jsPending is a message of the current pull on its way to Fibril.
type jsPending struct {
	msg   jetstream.Msg
	queue string
	fm    client.Message
	fut   *client.Future // nil when it could not be sent yet
}

// runJetStream creates (or updates) the durable pull consumer and moves the
// stream's messages into Fibril until ctx ends. Each pull is published
// pipelined; each message is acked once its confirm is in, in pull order.
func (b *Bridge) runJetStream(ctx context.Context, nc *nats.Conn, fc *client.Client, in *Ingest) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("bridge %s: jetstream: %w", b.opts.Name, err)
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       in.Durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       in.AckWait,
		MaxAckPending: 4 * in.FetchBatch,
		FilterSubject: in.Subject,
	}
	var cons jetstream.Consumer
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		cons, err = js.CreateOrUpdateConsumer(cctx, in.Stream, cfg)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		b.st.update(func(s *Stats) {
			s.LastError = fmt.Sprintf("jetstream consumer %s on %s: %v", in.Durable, in.Stream, err)
		})
		b.log.Warn("cannot create jetstream consumer, retrying", "stream", in.Stream, "durable", in.Durable, "err", err)
		if !sleep(ctx, backoff(b.opts.RetryBackoff, b.opts.MaxRetryBackoff, attempt)) {
			return nil
		}
	}
	b.markStarted()
	for attempt := 0; ctx.Err() == nil; {
		batch, err := cons.Fetch(in.FetchBatch, jetstream.FetchMaxWait(fetchWait))
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			b.st.update(func(s *Stats) { s.LastError = "jetstream fetch: " + err.Error() })
			sleep(ctx, backoff(b.opts.RetryBackoff, b.opts.MaxRetryBackoff, attempt))
			attempt++
			continue
		}
		attempt = 0
		var pending []*jsPending
		for m := range batch.Messages() {
			p := b.jsPrepare(in, m)
			p.fut = fc.PublishAsync(p.queue, p.fm)
			pending = append(pending, p)
		}
		b.st.update(func(s *Stats) { s.Received += uint64(len(pending)) })
		b.settleBatch(ctx, fc, in, pending)
	}
	return nil
}

// jsPrepare turns a JetStream message into its Fibril message, with its
// id (jsMessageID).
func (b *Bridge) jsPrepare(in *Ingest, m jetstream.Msg) *jsPending {
	id := jsMessageID(in.Stream, m)
	queue := in.queueFor(m.Subject())
	return &jsPending{msg: m, queue: queue, fm: client.Message{ID: id, Headers: fibrilHeaders(m.Subject(), m.Headers()), Body: m.Data()}}
}

// jsMessageID is the Fibril id of a JetStream message, the same for every
// redelivery of it: "<stream>/<Nats-Msg-Id>" with a Nats-Msg-Id, else
// "<stream>:<stream sequence>" ("" if its metadata cannot be read). A
// Nats-Msg-Id is JetStream's dedupe key within one stream, whatever the
// subject, so the stream alone is its namespace: two streams whose
// publishers number their messages alike do not dedupe each other in a
// queue they share, and within a stream the id means what JetStream
// takes it to mean. Stream names cannot contain '/', so the two forms
// never meet.
func jsMessageID(stream string, m jetstream.Msg) string {
	if id := m.Headers().Get(nats.MsgIdHdr); id != "" {
		return stream + "/" + id
	}
	md, err := m.Metadata()
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%s:%d", md.Stream, md.Sequence.Stream)
}

// settleBatch waits for each confirm in order and acks the message to
// JetStream. A publish that failed is retried (blocking the ingest: no more
// pulls) until it is confirmed. If ctx ends first, the messages not acked
// are nacked so that JetStream redelivers them at once.
func (b *Bridge) settleBatch(ctx context.Context, fc *client.Client, in *Ingest, pending []*jsPending) {
	for i, p := range pending {
		var cf client.Confirm
		var err error
		if p.queue == "" {
			err = fmt.Errorf("no queue for subject %s", p.msg.Subject())
		} else {
			cf, err = p.fut.Wait(ctx)
		}
		if err != nil {
			cf, err = b.retryJetStream(ctx, fc, in, p, pending[i:])
		}
		if errors.Is(err, errTerminated) {
			continue
		}
		if err != nil {
			for _, q := range pending[i:] {
				_ = q.msg.Nak()
			}
			return
		}
		b.noteQueue(p.queue, "jetstream ingest", nil)
		if err := p.msg.Ack(); err != nil {
			b.st.update(func(s *Stats) { s.LastError = "jetstream ack: " + err.Error() })
		}
		b.st.update(func(s *Stats) {
			s.Published++
			s.JetStreamAcked++
			if cf.Duplicate {
				s.Duplicates++
			}
		})
	}
}

// retryJetStream publishes p again until Fibril confirms it or ctx ends,
// keeping the ack deadline of p and of the rest of the pull alive. A
// message the broker can never take (too large, bad request) is
// terminated in JetStream, counted as dropped and logged: retrying it
// would block the stream forever.
func (b *Bridge) retryJetStream(ctx context.Context, fc *client.Client, in *Ingest, p *jsPending, rest []*jsPending) (client.Confirm, error) {
	b.st.setBlocked(true)
	defer b.st.setBlocked(false)
	lastProgress := time.Now()
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil {
			return client.Confirm{}, ctx.Err()
		}
		var cf client.Confirm
		err := fmt.Errorf("no queue for subject %s", p.msg.Subject())
		if p.queue != "" {
			cf, err = fc.Publish(ctx, p.queue, p.fm)
		}
		if err == nil {
			return cf, nil
		}
		if ctx.Err() != nil {
			return client.Confirm{}, ctx.Err()
		}
		if errors.Is(err, client.ErrTooLarge) || errors.Is(err, client.ErrBadRequest) {
			b.st.drop(err.(*client.Error).Code.String())
			b.log.Error("message can never be stored, terminated in jetstream", "stream", in.Stream, "subject", p.msg.Subject(), "err", err)
			_ = p.msg.Term()
			return client.Confirm{}, errTerminated
		}
		b.noteQueue(p.queue, "jetstream ingest", err)
		if attempt == 0 {
			b.log.Warn("fibril refused jetstream message, pulling paused", "queue", p.queue, "err", err)
		}
		b.st.update(func(s *Stats) { s.Retries++; s.LastError = "fibril: " + err.Error() })
		if time.Since(lastProgress) > in.AckWait/3 {
			for _, q := range rest {
				_ = q.msg.InProgress()
			}
			lastProgress = time.Now()
		}
		if !sleep(ctx, backoff(b.opts.RetryBackoff, b.opts.MaxRetryBackoff, attempt)) {
			return client.Confirm{}, ctx.Err()
		}
	}
}

var errTerminated = errors.New("bridge: message terminated")
