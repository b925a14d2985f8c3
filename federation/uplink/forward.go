package uplink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
)

// OriginIDHeader carries a forwarded message's own Message.ID, when it had
// one: the remote copy's ID is the uplink's stable id instead.
const OriginIDHeader = "Fibril-Origin-Id"

// declareTimeout bounds one declare of the remote queue.
const declareTimeout = 30 * time.Second

// errRedeclare: the remote queue is gone; declare it again.
var errRedeclare = errors.New("uplink: the remote queue is missing")

// forwarder forwards one local queue. Its run goroutine owns the messages
// in flight; mu guards only the stats others read.
type forwarder struct {
	u             *Uplink
	local, remote string
	lc, rc        *client.Client
	in            chan *client.Delivery // from the local consumer's handler
	ackDeadline   time.Duration         // the local queue's, when Info says; run's alone

	mu     sync.Mutex
	leased map[position]*client.Delivery // held, for the lease keeper
	st     QueueStats
	oldest time.Time // when the oldest message held was taken; zero: none
}

func newForwarder(u *Uplink, local string, lc, rc *client.Client) *forwarder {
	return &forwarder{u: u, local: local, remote: u.opts.remoteName(local), lc: lc, rc: rc,
		in: make(chan *client.Delivery, u.opts.Window), leased: make(map[position]*client.Delivery),
		st: QueueStats{Local: local, Remote: u.opts.remoteName(local), State: StateConnecting,
			BacklogMessages: -1, BacklogBytes: -1}}
}

// position names one local message: its id's parts.
type position struct {
	part        int
	incarnation uint64
	offset      uint64
}

func positionOf(d *client.Delivery) position {
	return position{part: d.Partition, incarnation: d.Incarnation, offset: d.Offset}
}

// entry is one local message on its way: taken from the local queue, not
// yet confirmed by the remote.
type entry struct {
	d     *client.Delivery
	msg   client.Message
	fut   *client.Future // the latest send; nil before the first
	sent  bool           // sent at least once
	taken time.Time
}

// run declares the remote queue, consumes the local one and forwards,
// again after every failure, until ctx ends.
func (f *forwarder) run(ctx context.Context) {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if !f.prepare(ctx) {
			return
		}
		cons, err := f.lc.Subscribe(ctx, f.local, client.SubscribeOptions{
			Prefetch: f.u.opts.Window, ManualAck: true, Handler: f.take,
			OnError: func(err error) { f.u.log.Debug("uplink local consumer", "queue", f.local, "err", err) },
		})
		if err != nil {
			f.setState(StateBackingOff, fmt.Sprintf("subscribe to the local queue: %v", err))
			if !sleep(ctx, f.u.backoff(attempt)) {
				return
			}
			continue
		}
		err = f.forward(ctx, cons)
		_ = cons.Close() // what it held unacked is redelivered to the next one
		if ctx.Err() != nil {
			return
		}
		f.u.log.Warn("uplink forwarding restarts", "queue", f.local, "err", err)
		if !errors.Is(err, errRedeclare) && !sleep(ctx, f.u.backoff(attempt)) {
			return
		}
	}
}

// prepare waits for the local queue to exist and declares the remote queue
// with the uplink's dedupe window; false when ctx ended.
func (f *forwarder) prepare(ctx context.Context) bool {
	for attempt := 0; ; attempt++ {
		local, ok, err := f.localInfo(ctx)
		if err == nil && !ok {
			f.setState(StateWaiting, "no such local queue")
			if !sleep(ctx, f.u.opts.Rescan) {
				return false
			}
			continue
		}
		f.ackDeadline = local.AckDeadline
		var res client.DeclareResult
		if err == nil {
			dctx, cancel := context.WithTimeout(ctx, declareTimeout)
			res, err = f.rc.DeclareQueue(dctx, client.Queue(f.remote).DedupeWindow(f.u.opts.DedupeWindow))
			cancel()
		}
		if ctx.Err() != nil {
			return false
		}
		if err != nil {
			state, wait := StateBackingOff, f.u.backoff(attempt)
			if refusal(err) {
				state, wait = StateRefused, f.u.opts.MaxBackoff
			}
			f.setState(state, fmt.Sprintf("declare remote queue %s: %v", f.remote, err))
			if attempt == 0 || state == StateRefused {
				f.u.log.Warn("uplink cannot declare the remote queue; retrying", "queue", f.local, "remote_queue", f.remote, "err", err)
			}
			if !sleep(ctx, wait) {
				return false
			}
			continue
		}
		weakened := local.Durability == client.Durable && res.Durability == client.Buffered
		f.mu.Lock()
		f.st.LocalDurability, f.st.RemoteDurability = local.Durability.String(), res.Durability.String()
		f.st.Weakened = weakened
		f.mu.Unlock()
		if weakened {
			f.u.log.Warn("uplink forwards a durable queue into a buffered remote queue: the remote confirm, after which the local copy is deleted, holds only until a power cut upstream",
				"queue", f.local, "remote_queue", f.remote)
		}
		f.setState(StateConnected, "")
		return true
	}
}

// localInfo is the local queue's mode and backlog, and false when it does
// not exist.
func (f *forwarder) localInfo(ctx context.Context) (LocalQueue, bool, error) {
	if f.u.opts.Info != nil {
		q, ok := f.u.opts.Info(f.local)
		return q, ok, nil
	}
	res, err := f.lc.DeclareQueue(ctx, client.Queue(f.local))
	if err != nil {
		return LocalQueue{}, false, fmt.Errorf("local queue %s: %w", f.local, err)
	}
	return LocalQueue{Durability: res.Durability, Messages: -1, Bytes: -1}, true, nil
}

// take is the local consumer's handler: it hands the delivery to forward.
func (f *forwarder) take(ctx context.Context, d *client.Delivery) error {
	f.lease(d)
	select {
	case f.in <- d:
	case <-ctx.Done():
	}
	return nil
}

// forward sends what the local consumer delivers, at most Window at once,
// and acks each message locally once the remote confirmed it, in offset
// order. After a failure it backs off and sends again from the first
// unconfirmed message. It returns when ctx ends, the consumer ends or the
// remote queue is gone.
func (f *forwarder) forward(ctx context.Context, cons *client.Consumer) error {
	var (
		pending  []*entry // in the order taken: per partition, in offset order
		byPos    = make(map[position]*entry)
		next     int // pending[:next] are in flight
		failures int
	)
	defer f.held(0, time.Time{})
	// Held messages keep their leases, even while a send blocks on the
	// lost link: an expiry counts as a delivery, and past MaxDeliveries
	// the local broker discards the message or dead-letters it.
	keepCtx, stopKeep := context.WithCancel(ctx)
	defer stopKeep()
	every := f.u.opts.ExtendEvery
	if f.ackDeadline > 0 {
		every = min(every, max(f.ackDeadline/3, time.Millisecond))
	}
	go f.keepLeases(keepCtx, every)
	for {
		for next < len(pending) && next < f.u.opts.Window {
			e := pending[next]
			if f.u.limiter != nil {
				if err := f.u.limiter.Wait(ctx); err != nil {
					return err
				}
			}
			if e.sent {
				f.count(func(s *QueueStats) { s.Resent++ })
			}
			e.sent = true
			// Behind the previous send on its connection, or not at all:
			// after a lost connection nothing may be stored ahead of the
			// messages this loop will resend from the head.
			var prev *client.Future
			if next > 0 {
				prev = pending[next-1].fut
			}
			e.fut = f.rc.PublishAsyncAfter(ctx, prev, f.remote, e.msg)
			next++
		}
		var oldest time.Time
		var head <-chan struct{}
		if len(pending) > 0 {
			oldest = pending[0].taken
		}
		if next > 0 {
			head = pending[0].fut.Done()
		}
		f.held(next, oldest)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-cons.Done():
			return fmt.Errorf("the local consumer ended: %w", cons.Err())
		case d := <-f.in:
			pos := positionOf(d)
			if e, ok := byPos[pos]; ok {
				e.d = d // redelivered (its lease expired): settle the newer delivery
				continue
			}
			e := &entry{d: d, msg: f.message(d), taken: time.Now()}
			byPos[pos] = e
			pending = append(pending, e)
		case <-head:
			e := pending[0]
			c, err := e.fut.Result()
			if err != nil && !permanent(err) {
				next = 0 // everything in flight goes again, in order
				failures++
				f.setState(StateBackingOff, fmt.Sprintf("publish to %s: %v", f.remote, err))
				if failures == 1 {
					f.u.log.Warn("uplink publish failed; resending from the first unconfirmed message", "queue", f.local, "err", err)
				}
				if errors.Is(err, client.ErrNotFound) {
					return errRedeclare
				}
				if !sleep(ctx, f.u.backoff(failures-1)) {
					return ctx.Err()
				}
				continue
			}
			pending[0] = nil
			pending = pending[1:]
			next--
			delete(byPos, positionOf(e.d))
			f.release(e.d)
			if err != nil {
				f.u.log.Error("the remote queue can never take this message; discarded locally (to the dead-letter queue if it has one)",
					"queue", f.local, "partition", e.d.Partition, "offset", e.d.Offset, "err", err)
				f.settle(e.d.Nack(false))
				f.count(func(s *QueueStats) { s.Refused++ })
				continue
			}
			f.settle(e.d.Ack())
			if failures > 0 {
				failures = 0
				f.setState(StateConnected, "")
			}
			now := time.Now()
			f.count(func(s *QueueStats) {
				s.Forwarded++
				if c.Duplicate {
					s.Duplicates++
				}
				s.LastConfirm = now
			})
		}
	}
}

// message is the remote copy of d: its stable id, its key (or one naming
// its local partition, so that the partition's order holds upstream), its
// headers and body.
func (f *forwarder) message(d *client.Delivery) client.Message {
	src := f.u.opts.Source
	m := client.Message{
		ID:   fmt.Sprintf("uplink/%s/%s/%d/%d/%d", src, f.local, d.Incarnation, d.Partition, d.Offset),
		Key:  d.Key,
		Body: d.Body,
	}
	if m.Key == "" {
		m.Key = fmt.Sprintf("uplink/%s/%s/%d", src, f.local, d.Partition)
	}
	m.Headers = d.Headers
	if d.ID != "" {
		m.Headers = append(append(make([]client.Header, 0, len(d.Headers)+1), d.Headers...),
			client.Header{Key: OriginIDHeader, Value: d.ID})
	}
	return m
}

// settle logs a local ack or nack that did not take: the message comes
// again and the remote's dedupe window drops the repeat.
func (f *forwarder) settle(err error) {
	if err != nil {
		f.u.log.Debug("uplink local settle did not take; the message will be forwarded again", "queue", f.local, "err", err)
	}
}

func (f *forwarder) setState(s State, reason string) {
	f.mu.Lock()
	f.st.State, f.st.Reason = s, reason
	f.mu.Unlock()
}

func (f *forwarder) count(update func(*QueueStats)) {
	f.mu.Lock()
	update(&f.st)
	f.mu.Unlock()
}

func (f *forwarder) held(inFlight int, oldest time.Time) {
	f.mu.Lock()
	f.st.InFlight, f.oldest = inFlight, oldest
	f.mu.Unlock()
}

// stats is the queue's stats, with its backlog read now.
func (f *forwarder) stats() QueueStats {
	f.mu.Lock()
	s := f.st
	if !f.oldest.IsZero() {
		s.OldestWaiting = time.Since(f.oldest)
	}
	f.mu.Unlock()
	if f.u.opts.Info != nil {
		if q, ok := f.u.opts.Info(f.local); ok {
			s.BacklogMessages, s.BacklogBytes = q.Messages, q.Bytes
		}
	}
	return s
}

// permanent reports whether the remote will never take the message as it
// is: retrying cannot help.
func permanent(err error) bool {
	return errors.Is(err, client.ErrTooLarge) || errors.Is(err, client.ErrBadRequest) || errors.Is(err, client.ErrInvalid)
}

// refusal reports whether the remote refused the uplink itself: only an
// operator can change that.
func refusal(err error) bool {
	return errors.Is(err, client.ErrUnauthorized) || errors.Is(err, client.ErrConflict) || errors.Is(err, client.ErrBadRequest)
}

// lease records d as held, for keepLeases; release, as settled.
func (f *forwarder) lease(d *client.Delivery) {
	f.mu.Lock()
	f.leased[positionOf(d)] = d
	f.mu.Unlock()
}

func (f *forwarder) release(d *client.Delivery) {
	f.mu.Lock()
	delete(f.leased, positionOf(d))
	f.mu.Unlock()
}

// keepLeases extends the lease of every delivery held, every period.
func (f *forwarder) keepLeases(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	defer func() { f.mu.Lock(); clear(f.leased); f.mu.Unlock() }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.mu.Lock()
		ds := make([]*client.Delivery, 0, len(f.leased))
		for _, d := range f.leased {
			ds = append(ds, d)
		}
		f.mu.Unlock()
		for _, d := range ds {
			_ = d.InProgress()
		}
	}
}
