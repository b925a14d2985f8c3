package e2ebench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream is a Target on a running NATS server with JetStream, file
// storage, one stream per run. Its sync mode is the server's: Mode only
// labels it.
type JetStream struct {
	// URL is the server's client URL.
	URL string
	// SyncMode labels the server's sync setting: "always-sync" or
	// "default-sync".
	SyncMode string
	// MaxAckPending is the consumer's window; default 1000.
	MaxAckPending int
	// Keep leaves each stream in place on Close; default: deleted.
	Keep bool
}

// System implements Target.
func (j JetStream) System() string { return "jetstream" }

// Mode implements Target.
func (j JetStream) Mode() string { return j.SyncMode }

// Open implements Target.
func (j JetStream) Open(ctx context.Context, name string, publishers, window int) (Stream, error) {
	s := &jsStream{name: name, keep: j.Keep}
	connect := func(opts ...jetstream.JetStreamOpt) (*nats.Conn, jetstream.JetStream, error) {
		nc, err := nats.Connect(j.URL, nats.Name("fibril-bench"), nats.NoReconnect())
		if err != nil {
			return nil, nil, fmt.Errorf("jetstream: connect %s: %w", j.URL, err)
		}
		s.conns = append(s.conns, nc)
		js, err := jetstream.New(nc, opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("jetstream: %w", err)
		}
		return nc, js, nil
	}
	_, js, err := connect()
	if err != nil {
		s.Close()
		return nil, err
	}
	s.admin = js
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name},
		Storage: jetstream.FileStorage, Retention: jetstream.LimitsPolicy})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("jetstream: create stream %s: %w", name, err)
	}
	s.stream = st
	for range publishers {
		_, pjs, err := connect(jetstream.WithPublishAsyncMaxPending(window))
		if err != nil {
			s.Close()
			return nil, err
		}
		s.pubs = append(s.pubs, pjs)
	}
	pending := j.MaxAckPending
	if pending == 0 {
		pending = 1000
	}
	s.maxAckPending = pending
	return s, nil
}

type jsStream struct {
	name          string
	conns         []*nats.Conn
	admin         jetstream.JetStream
	stream        jetstream.Stream
	pubs          []jetstream.JetStream
	consumed      jetstream.ConsumeContext
	maxAckPending int
	keep          bool
}

type jsPending struct{ f jetstream.PubAckFuture }

func (p jsPending) Wait(ctx context.Context) (time.Time, error) {
	select {
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	case <-p.f.Ok():
		return time.Now(), nil
	case err := <-p.f.Err():
		return time.Now(), err
	}
}

// Publish waits while the publisher's window is full: PublishAsync gives
// up on a stall after a short wait, so it is retried until a slot frees.
func (s *jsStream) Publish(p int, body []byte) (Pending, error) {
	for {
		f, err := s.pubs[p].PublishAsync(s.name, body, jetstream.WithStallWait(time.Second))
		if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("jetstream: publish: %w", err)
		}
		return jsPending{f}, nil
	}
}

func (s *jsStream) Queues() int { return 1 }

func (s *jsStream) Consume(ctx context.Context, deliver func(body []byte, received, arrived time.Time)) error {
	cons, err := s.stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "bench",
		AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: s.maxAckPending})
	if err != nil {
		return fmt.Errorf("jetstream: create consumer on %s: %w", s.name, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		arrived := time.Now()
		var received time.Time // when the stream stored it
		if meta, err := m.Metadata(); err == nil {
			received = meta.Timestamp
		}
		deliver(m.Data(), received, arrived)
		m.Ack()
	})
	if err != nil {
		return fmt.Errorf("jetstream: consume %s: %w", s.name, err)
	}
	s.consumed = cc
	return nil
}

func (s *jsStream) Close() error {
	if s.consumed != nil {
		s.consumed.Stop()
	}
	var errs []error
	if s.stream != nil && !s.keep {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errs = append(errs, s.admin.DeleteStream(ctx, s.name))
		cancel()
	}
	for _, nc := range s.conns {
		nc.Close()
	}
	return errors.Join(errs...)
}
