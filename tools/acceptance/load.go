package acceptance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
)

// QueueSpec is a queue the load runs on.
type QueueSpec struct {
	Name       string
	Buffered   bool // buffered (confirms at write) rather than durable (at sync)
	Partitions int  // default 1
}

// Declare declares q on c (idempotent).
func (q QueueSpec) Declare(ctx context.Context, c *client.Client) error {
	cfg := client.Queue(q.Name).Durable()
	if q.Buffered {
		cfg = client.Queue(q.Name).Buffered()
	}
	if q.Partitions > 1 {
		cfg = cfg.Partitions(q.Partitions)
	}
	if _, err := c.DeclareQueue(ctx, cfg); err != nil {
		return fmt.Errorf("acceptance: declare %s: %w", q.Name, err)
	}
	return nil
}

// LoadOptions configure StartLoad. Zero values take the documented
// defaults.
type LoadOptions struct {
	// Addr is the broker's client address. Required.
	Addr string
	// Admin returns the admin API base URL of the broker running now, or ""
	// while it is down; the runner records each partition's frontiers from
	// it every FrontierEvery. nil: no frontier records.
	Admin func() string
	// History receives every send, confirm, failure, delivery, ack and
	// frontier. Required.
	History *History
	// Queues the load runs on; StartLoad declares them. Required.
	Queues []QueueSpec
	// Publishers per queue, each on its own connection with its own
	// increasing sequence. Default 2.
	Publishers int
	// Consumers per queue, each on its own connection, acking every
	// delivery. Default 1; negative: none.
	Consumers int
	// Window is the publishes in flight per publisher. Default 64.
	Window int
	// Rate caps each publisher's publishes per second. Default 0: no cap
	// beyond Window.
	Rate int
	// BodySize is each body's length in bytes (at least the ID's). Default 200.
	BodySize int
	// Keys spread each publisher's messages over partitions. Default 16.
	Keys int
	// Prefetch of each consumer. Default 50.
	Prefetch int
	// Seed makes keys and bodies reproducible. Default 0 is a valid seed.
	Seed uint64
	// Prefix starts every publisher name and message ID, so runs sharing a
	// history never collide. Default "r".
	Prefix string
	// FrontierEvery is how often frontiers are recorded. Default 100 ms.
	FrontierEvery time.Duration
}

func (o LoadOptions) withDefaults() LoadOptions {
	if o.Publishers == 0 {
		o.Publishers = 2
	}
	if o.Consumers == 0 {
		o.Consumers = 1
	}
	if o.Window == 0 {
		o.Window = 64
	}
	if o.BodySize == 0 {
		o.BodySize = 200
	}
	if o.Keys == 0 {
		o.Keys = 16
	}
	if o.Prefetch == 0 {
		o.Prefetch = 50
	}
	if o.Prefix == "" {
		o.Prefix = "r"
	}
	if o.FrontierEvery == 0 {
		o.FrontierEvery = 100 * time.Millisecond
	}
	return o
}

// Counts are what a Runner has seen so far.
type Counts struct {
	Sent, Confirmed, Failed, Delivered, Acked int64
}

// Runner is a running load: publishers, consumers and a frontier poller.
// It survives broker restarts: its clients reconnect to the same address.
type Runner struct {
	o    LoadOptions
	h    *History
	stop chan struct{}
	wg   sync.WaitGroup

	clients []*client.Client
	cons    []*client.Consumer

	sent, confirmed, failed, delivered, acked atomic.Int64
	unanswered                                atomic.Int64  // set by Stop
	progress                                  chan struct{} // signalled on every confirm and delivery
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func (r *Runner) dial(ctx context.Context, name string) (*client.Client, error) {
	c, err := client.Dial(ctx, r.o.Addr, client.Options{
		ClientName: name, Logger: quiet(), MaxInFlight: r.o.Window,
		InitialBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
	})
	if err != nil {
		return nil, fmt.Errorf("acceptance: dial %s as %s: %w", r.o.Addr, name, err)
	}
	r.clients = append(r.clients, c)
	return c, nil
}

// StartLoad declares the queues and starts the publishers, consumers and
// frontier poller. Stop ends them.
func StartLoad(ctx context.Context, o LoadOptions) (*Runner, error) {
	o = o.withDefaults()
	if o.Addr == "" || o.History == nil || len(o.Queues) == 0 {
		return nil, errors.New("acceptance: LoadOptions needs Addr, History and Queues")
	}
	r := &Runner{o: o, h: o.History, stop: make(chan struct{}), progress: make(chan struct{}, 1)}
	fail := func(err error) (*Runner, error) {
		r.Stop()
		return nil, err
	}
	for qi, q := range o.Queues {
		for i := range o.Publishers {
			name := fmt.Sprintf("%s-%s-p%d", o.Prefix, q.Name, i)
			c, err := r.dial(ctx, name)
			if err != nil {
				return fail(err)
			}
			if err := q.Declare(ctx, c); err != nil {
				return fail(err)
			}
			rng := rand.New(rand.NewPCG(o.Seed, uint64(qi*1000+i)))
			r.wg.Add(1)
			go r.publish(c, q.Name, name, rng)
		}
		for i := range max(o.Consumers, 0) {
			name := fmt.Sprintf("%s-%s-c%d", o.Prefix, q.Name, i)
			c, err := r.dial(ctx, name)
			if err != nil {
				return fail(err)
			}
			cons, err := c.Subscribe(ctx, q.Name, client.SubscribeOptions{
				Prefetch: o.Prefetch, ManualAck: true, OnError: func(error) {},
				Handler: func(_ context.Context, d *client.Delivery) error { r.consume(q.Name, d); return nil },
			})
			if err != nil {
				return fail(fmt.Errorf("acceptance: subscribe %s: %w", q.Name, err))
			}
			r.cons = append(r.cons, cons)
		}
	}
	if o.Admin != nil {
		r.wg.Add(1)
		go r.pollFrontiers()
	}
	return r, nil
}

// Body is the body of message id: the ID, a colon, then filler derived
// from the ID, size bytes in all (never shorter than the ID and colon).
func Body(id string, size int) []byte {
	b := make([]byte, 0, max(size, len(id)+1))
	b = append(b, id...)
	b = append(b, ':')
	for i := 0; len(b) < size; i++ {
		b = append(b, 'a'+byte((int(id[i%len(id)])+i)%26))
	}
	return b
}

type pendingPub struct {
	id  string
	seq int64
	f   *client.Future
}

func (r *Runner) publish(c *client.Client, queue, pub string, rng *rand.Rand) {
	defer r.wg.Done()
	pending := make(chan pendingPub, r.o.Window)
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for p := range pending {
			<-p.f.Done()
			cf, err := p.f.Result()
			if err != nil {
				r.failed.Add(1)
				r.h.Record(Event{Kind: KindFail, Queue: queue, Pub: pub, Seq: p.seq, ID: p.id, Err: err.Error()})
				continue
			}
			r.confirmed.Add(1)
			r.h.Record(Event{Kind: KindConfirm, Queue: queue, Pub: pub, Seq: p.seq, ID: p.id, Part: cf.Partition, Off: cf.Offset})
			r.signal()
		}
	}()
	defer func() { close(pending); <-collected }()
	var tick *time.Ticker
	if r.o.Rate > 0 {
		tick = time.NewTicker(time.Second / time.Duration(r.o.Rate))
		defer tick.Stop()
	}
	for seq := int64(1); ; seq++ {
		if tick != nil {
			select {
			case <-r.stop:
				return
			case <-tick.C:
			}
		}
		select {
		case <-r.stop:
			return
		default:
		}
		id := fmt.Sprintf("%s.%d", pub, seq)
		m := client.Message{ID: id, Key: fmt.Sprint("k", rng.IntN(r.o.Keys)), Body: Body(id, r.o.BodySize)}
		r.h.Record(Event{Kind: KindSend, Queue: queue, Pub: pub, Seq: seq, ID: id})
		r.sent.Add(1)
		f := c.PublishAsync(queue, m)
		pending <- pendingPub{id: id, seq: seq, f: f}
		if isDoneWith(f, client.ErrNotConnected) {
			// The broker is down: pace the attempts while the client
			// reconnects.
			select {
			case <-r.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}

func isDoneWith(f *client.Future, target error) bool {
	select {
	case <-f.Done():
		_, err := f.Result()
		return errors.Is(err, target)
	default:
		return false
	}
}

func (r *Runner) consume(queue string, d *client.Delivery) {
	r.h.Record(Event{Kind: KindDeliver, Queue: queue, ID: d.ID, Part: d.Partition, Off: d.Offset, N: d.Deliveries})
	r.delivered.Add(1)
	if d.Ack() == nil {
		r.h.Record(Event{Kind: KindAck, Queue: queue, ID: d.ID, Part: d.Partition, Off: d.Offset})
		r.acked.Add(1)
	}
	r.signal()
}

func (r *Runner) signal() {
	select {
	case r.progress <- struct{}{}:
	default:
	}
}

func (r *Runner) pollFrontiers() {
	defer r.wg.Done()
	t := time.NewTicker(r.o.FrontierEvery)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			r.RecordFrontiers(ctx) // a broker that is down records nothing
			cancel()
		}
	}
}

// RecordFrontiers records every partition's frontiers now, from the admin
// API. Call it right before a fault: the verifier judges a buffered
// queue's losses against the last frontiers recorded before it.
func (r *Runner) RecordFrontiers(ctx context.Context) error {
	if r.o.Admin == nil {
		return errors.New("acceptance: no Admin in LoadOptions")
	}
	return RecordFrontiers(ctx, r.h, r.o.Admin(), r.o.Queues)
}

// RecordFrontiers records into h every partition's frontiers of queues,
// read from the admin API at admin.
func RecordFrontiers(ctx context.Context, h *History, admin string, queues []QueueSpec) error {
	for _, q := range queues {
		qi, err := GetQueueInfo(ctx, admin, q.Name)
		if err != nil {
			return err
		}
		for _, p := range qi.Partitions {
			e := Event{Kind: KindFrontier, Queue: q.Name, Part: p.Index, Durable: p.DurableNext, Written: p.WrittenNext}
			if p.LastSync != nil {
				e.LastSync = *p.LastSync
			}
			h.Record(e)
		}
	}
	return nil
}

// Counts returns what the runner has seen so far.
func (r *Runner) Counts() Counts {
	return Counts{Sent: r.sent.Load(), Confirmed: r.confirmed.Load(), Failed: r.failed.Load(),
		Delivered: r.delivered.Load(), Acked: r.acked.Load()}
}

// WaitConfirmed waits until at least n publishes have been confirmed
// since the runner started, or ctx ends.
func (r *Runner) WaitConfirmed(ctx context.Context, n int64) error {
	for r.confirmed.Load() < n {
		select {
		case <-r.progress:
		case <-ctx.Done():
			return fmt.Errorf("acceptance: %d of %d confirms: %w", r.confirmed.Load(), n, ctx.Err())
		}
	}
	return nil
}

// stopWait bounds how long Stop waits for the publishes in flight.
const stopWait = time.Minute

// Stop stops publishing and consuming, waits up to a minute for every
// publish in flight to be answered, and closes the runner's connections
// (which fails what is still unanswered: Unanswered counts those).
func (r *Runner) Stop() {
	select {
	case <-r.stop:
		return
	default:
	}
	close(r.stop)
	for _, c := range r.cons {
		c.Close()
	}
	waited := make(chan struct{})
	go func() { r.wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(stopWait):
		r.unanswered.Store(r.sent.Load() - r.confirmed.Load() - r.failed.Load())
	}
	for _, c := range r.clients {
		c.Close()
	}
	<-waited
}

// Unanswered is how many publishes the broker had not answered a minute
// after Stop was called (a broker answers every publish: with a confirm
// or an error). 0 until Stop returns.
func (r *Runner) Unanswered() int64 { return r.unanswered.Load() }
