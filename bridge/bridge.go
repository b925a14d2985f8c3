package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fibril-edge/fibril/appliance/client"
)

// SubjectHeader is the Fibril header that carries a message's NATS subject.
const SubjectHeader = "nats-subject"

// Bridge is one NATS connection with its ingests and egresses. New checks
// the options; Run does the work until its context ends.
type Bridge struct {
	opts  Options
	log   *slog.Logger
	st    counters
	ready chan struct{} // closed once every ingest and egress has started

	ran     atomic.Bool
	startMu sync.Mutex
	started int // ingests and egresses started, guarded by startMu
}

// markStarted records that one ingest or egress has started and closes
// ready with the last one.
func (b *Bridge) markStarted() {
	b.startMu.Lock()
	defer b.startMu.Unlock()
	b.started++
	if b.started == len(b.opts.Ingest)+len(b.opts.Egress) {
		close(b.ready)
	}
}

// New returns a Bridge for opts, or an error matching ErrInvalid saying
// what is wrong with them.
func New(opts Options) (*Bridge, error) {
	o, err := opts.compile()
	if err != nil {
		return nil, err
	}
	b := &Bridge{opts: o, log: o.Logger.With("bridge", o.Name), ready: make(chan struct{})}
	urls, routes := describe(o)
	b.st.s = Stats{Name: o.Name, State: StateStarting, URLs: urls, Routes: routes, Dropped: map[string]uint64{}}
	return b, nil
}

// Stats returns a snapshot of the bridge's state and counters. It is safe
// to call at any time, from any goroutine.
func (b *Bridge) Stats() Stats {
	if exists := b.opts.QueueExists; exists != nil {
		for _, q := range b.st.missingQueues() {
			if exists(q) {
				b.noteQueue(q, "declare", nil)
			}
		}
	}
	return b.st.snapshot()
}

// checkQueues reports, at start, the fixed ingest queues that QueueExists
// says do not exist.
func (b *Bridge) checkQueues() {
	if b.opts.QueueExists == nil {
		return
	}
	for _, in := range b.opts.Ingest {
		if !in.tmpl.fixed() {
			continue
		}
		if q := in.tmpl.expand(nil); !b.opts.QueueExists(q) {
			b.noteQueue(q, string(in.Mode)+" ingest", client.ErrNotFound)
		}
	}
}

// Ready is closed once every ingest and egress has started: core
// subscriptions are registered with the NATS server, JetStream consumers
// exist, egress consumers are subscribed. A Bridge runs once; Ready stays
// open if Run ends before that.
func (b *Bridge) Ready() <-chan struct{} { return b.ready }

// Run connects to NATS and Fibril and runs the ingests and egresses until
// ctx ends, then stops them (unacked JetStream messages are released to
// JetStream, unsettled Fibril deliveries to the broker) and returns nil.
// An unreachable NATS server or Fibril broker is retried with backoff
// (State says "reconnecting", LastError why), not an error. Run fails at
// once only for what retrying cannot fix: a bad credentials or TLS file,
// or a Fibril token the broker refuses.
func (b *Bridge) Run(ctx context.Context) error {
	if b.ran.Swap(true) {
		return fmt.Errorf("bridge %s: Run called twice", b.opts.Name)
	}
	defer b.st.setState(StateStopped)
	nc, err := b.connectNATS()
	if err != nil {
		return fmt.Errorf("bridge %s: nats: %w", b.opts.Name, err)
	}
	defer func() {
		b.st.setState(StateStopped)
		nc.Close()
	}()
	fc, err := b.dialFibril(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("bridge %s: fibril: %w", b.opts.Name, err)
	}
	defer fc.Close()
	b.checkQueues()

	var wg sync.WaitGroup
	errs := make(chan error, len(b.opts.Ingest)+len(b.opts.Egress))
	for i := range b.opts.Ingest {
		in := &b.opts.Ingest[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if in.Mode == JetStream {
				err = b.runJetStream(ctx, nc, fc, in)
			} else {
				err = b.runCore(ctx, nc, fc, in)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	for i := range b.opts.Egress {
		eg := &b.opts.Egress[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.runEgress(ctx, nc, fc, eg); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return errors.Join(collect(errs)...)
}

func collect(ch <-chan error) []error {
	var out []error
	for err := range ch {
		out = append(out, err)
	}
	return out
}

// connectNATS builds the nats.go options and connects, retrying in the
// background when no server answers yet.
func (b *Bridge) connectNATS() (*nats.Conn, error) {
	o := b.opts
	opts := []nats.Option{
		nats.Name("fibril-bridge-" + o.Name),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.CustomReconnectDelay(func(attempts int) time.Duration {
			return backoff(o.ReconnectWait, o.MaxReconnectWait, attempts)
		}),
		nats.ConnectHandler(func(*nats.Conn) {
			b.st.setState(StateConnected)
			b.log.Info("nats connected")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			b.st.setState(StateConnected)
			b.st.update(func(s *Stats) { s.Reconnects++ })
			b.log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted())
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			b.st.setState(StateReconnecting)
			if err != nil {
				b.st.update(func(s *Stats) { s.LastError = "nats: " + err.Error() })
			}
			b.log.Warn("nats disconnected", "err", err)
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			b.st.update(func(s *Stats) { s.LastError = "nats: " + err.Error() })
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			b.st.update(func(s *Stats) { s.LastError = "nats: " + err.Error() })
			b.log.Warn("nats error", "err", err)
		}),
	}
	if o.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.NKeySeedFile != "" {
		opt, err := nats.NkeyOptionFromSeed(o.NKeySeedFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, opt)
	}
	if o.User != "" {
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	if o.Token != "" {
		opts = append(opts, nats.Token(o.Token))
	}
	if o.TLS != nil {
		opts = append(opts, nats.Secure(o.TLS))
	}
	if len(o.TLSCAFiles) > 0 {
		opts = append(opts, nats.RootCAs(o.TLSCAFiles...))
	}
	if o.TLSCertFile != "" {
		opts = append(opts, nats.ClientCert(o.TLSCertFile, o.TLSKeyFile))
	}
	opts = append(opts, o.NATSOptions...)
	url := o.URLs[0]
	for _, u := range o.URLs[1:] {
		url += "," + u
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, err
	}
	if nc.IsConnected() {
		b.st.setState(StateConnected)
	} else {
		b.st.setState(StateReconnecting)
		b.st.update(func(s *Stats) { s.LastError = "nats: no server reachable yet" })
		b.log.Warn("nats not reachable yet, retrying", "urls", RedactURLs(o.URLs))
	}
	return nc, nil
}

// dialFibril connects to the broker, retrying with backoff while it does
// not answer; a refused token is final.
func (b *Bridge) dialFibril(ctx context.Context) (*client.Client, error) {
	opts := client.Options{Token: b.opts.FibrilToken, TLS: b.opts.FibrilTLS, ClientName: "bridge-" + b.opts.Name, Logger: b.log}
	for attempt := 0; ; attempt++ {
		fc, err := client.Dial(ctx, b.opts.FibrilAddr, opts)
		if err == nil {
			return fc, nil
		}
		if errors.Is(err, client.ErrUnauthorized) || errors.Is(err, client.ErrInvalid) {
			return nil, err
		}
		b.st.update(func(s *Stats) { s.LastError = "fibril: " + err.Error() })
		b.log.Warn("fibril not reachable, retrying", "addr", b.opts.FibrilAddr, "err", err)
		if !sleep(ctx, backoff(b.opts.RetryBackoff, b.opts.MaxRetryBackoff, attempt)) {
			return nil, ctx.Err()
		}
	}
}

// noteQueue records what a publish to queue or a subscription on it said
// about the queue's existence: an error matching client.ErrNotFound marks
// it missing (logged once, as an error), nil marks it present again. Other
// errors say nothing about it.
func (b *Bridge) noteQueue(queue, user string, err error) {
	switch {
	case err == nil:
		if b.st.setMissing(queue, false) {
			b.log.Info("queue exists now", "queue", queue, "for", user)
		}
	case errors.Is(err, client.ErrNotFound):
		if b.st.setMissing(queue, true) {
			b.log.Error("queue does not exist; declare it", "queue", queue, "for", user, "err", err)
		}
	}
}

// backoff is the wait before attempt (from 0): base doubled per attempt,
// capped at max, jittered down by up to a quarter.
func backoff(base, max time.Duration, attempt int) time.Duration {
	d := base
	for i := 0; i < attempt && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d - time.Duration(rand.Int64N(int64(d)/4+1))
}

// sleep waits d or until ctx ends; false if ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// fibrilHeaders turns NATS headers into Fibril headers (keys sorted, values
// in order) and adds the subject.
func fibrilHeaders(subject string, h nats.Header) []client.Header {
	out := make([]client.Header, 0, len(h)+1)
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range h[k] {
			out = append(out, client.Header{Key: k, Value: v})
		}
	}
	return append(out, client.Header{Key: SubjectHeader, Value: subject})
}

// queueFor names the queue a subject maps to, "" if it cannot.
func (in *Ingest) queueFor(subject string) string {
	if in.tmpl.fixed() {
		return in.tmpl.expand(nil)
	}
	caps, ok := matchSubject(in.Subject, subject)
	if !ok {
		return ""
	}
	return in.tmpl.expand(caps)
}
