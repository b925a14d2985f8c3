package federation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/appliance/server"
	"github.com/fibril-edge/fibril/federation/control"
)

// consumeTimeout bounds subscribing on the owner, dial included.
const consumeTimeout = 10 * time.Second

// Consume serves a subscription to a queue another node owns: it consumes
// the queue on the owner, over the client connection this node keeps per
// owner (the one forwarded publishes use), and hands each delivery to
// o.Deliver under a tag of its own; settles go back to the owner. ok is
// false when this node serves the queue or no node does.
//
// The owner leases what it delivers to this node, so everything the
// broker promises a consumer holds through the proxy: unsettled
// deliveries come back when the subscription or its connection ends, and
// a delivery whose lease passed is delivered again. One difference: a
// settle the owner refuses (its lease had expired) is logged here, not
// answered to the client, since the proxy answers settles at once; so is
// an extension (Extend) of a lease that had expired on the owner.
//
// The subscription follows the queue: once the control state names
// another owner (a failover moved it, here or elsewhere) or no longer
// has the queue, or the subscription on the owner ends by itself, it
// ends and o.Ended tells the client, which subscribes again and so
// reaches the queue where it is served now.
func (c *Cluster) Consume(ctx context.Context, queue string, o appliance.SubscribeOptions) (server.Consumer, int, bool, error) {
	if _, _, ok := c.Owner(queue); !ok {
		return nil, 0, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, consumeTimeout)
	defer cancel()
	id, cl, err := c.ownerClient(ctx, queue)
	if errors.Is(err, errServedHere) {
		return nil, 0, false, nil // this node took the queue over meanwhile: the broker serves it
	}
	if err != nil {
		return nil, 0, true, err
	}
	p := &proxyConsumer{c: c, queue: queue, owner: id, deliver: o.Deliver, ended: o.Ended,
		held: map[uint64]*client.Delivery{}, log: c.log.With("queue", queue, "owner", id)}
	cons, err := cl.Subscribe(ctx, queue, client.SubscribeOptions{Prefetch: o.Prefetch, ManualAck: true,
		Handler: p.handle, OnError: p.report})
	if err != nil {
		return nil, 0, true, fmt.Errorf("consume %s on node %s: %w", queue, id, brokerError(err))
	}
	p.mu.Lock()
	p.cons = cons
	p.mu.Unlock()
	c.proxyMu.Lock()
	c.proxies[p] = struct{}{}
	c.proxyMu.Unlock()
	go func() {
		select {
		case <-cons.Done():
			p.end(fmt.Sprintf("the subscription on node %s ended: %v", id, cons.Err()))
		case <-c.stop:
		}
	}()
	c.checkProxies() // the queue may have moved while it subscribed
	return p, cons.Partitions(), true, nil
}

// checkProxies ends the proxied subscriptions whose queue the control
// state no longer places on the node they consume from.
func (c *Cluster) checkProxies() {
	c.proxyMu.Lock()
	ps := slices.Collect(maps.Keys(c.proxies))
	c.proxyMu.Unlock()
	if len(ps) == 0 {
		return
	}
	owners := map[string]string{}
	c.node.read(func(s *control.State) {
		for _, p := range ps {
			if as := s.Assignments[p.queue]; len(as) > 0 {
				owners[p.queue] = as[0].Owner
			}
		}
	})
	for _, p := range ps {
		switch owner, ok := owners[p.queue]; {
		case !ok:
			p.end("the cluster no longer has the queue")
		case owner != p.owner:
			p.end("the queue moved to node " + owner)
		}
	}
}

// proxyConsumer is a subscription on the owner seen through this node.
// Its tags are its own: the owner's tags are per connection and start
// again after a reconnect, so two deliveries could share one.
type proxyConsumer struct {
	c       *Cluster
	queue   string
	owner   string // the node consumed from
	deliver func(appliance.Delivery)
	ended   func() // appliance.SubscribeOptions.Ended
	log     *slog.Logger

	mu     sync.Mutex // guards the fields below
	cons   *client.Consumer
	held   map[uint64]*client.Delivery
	next   uint64
	closed bool
	// paused holds deliveries back from the local connection (the
	// server's delivery budget paused it); resumed closes when it ends.
	// waiting counts handlers held there.
	paused  bool
	resumed chan struct{}
	waiting int
}

// Held is how many deliveries the proxy holds for its local client, not
// settled yet (the server's sessions list it).
func (p *proxyConsumer) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.held)
}

var (
	_ server.Consumer      = (*proxyConsumer)(nil)
	_ server.Extender      = (*proxyConsumer)(nil)
	_ server.DelayedNacker = (*proxyConsumer)(nil)
	_ interface {
		Pause()
		Resume()
	} = (*proxyConsumer)(nil) // the server's delivery budget pauses it
)

// Pause holds the deliveries the owner sends back from the local
// connection: the owner stops at the subscription's window, so what a
// paused proxy holds is bounded by its prefetch.
func (p *proxyConsumer) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.paused && !p.closed {
		p.paused, p.resumed = true, make(chan struct{})
	}
}

// Resume lets held deliveries go on to the local connection.
func (p *proxyConsumer) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resumeLocked()
}

func (p *proxyConsumer) resumeLocked() {
	if p.paused {
		p.paused = false
		close(p.resumed)
	}
}

// handle runs on the client's dispatch goroutine, one delivery at a time,
// in the owner's delivery order.
func (p *proxyConsumer) handle(ctx context.Context, d *client.Delivery) error {
	p.mu.Lock()
	for p.paused && !p.closed {
		resumed := p.resumed
		p.waiting++
		p.mu.Unlock()
		select {
		case <-resumed:
		case <-ctx.Done():
		}
		p.mu.Lock()
		p.waiting--
		if ctx.Err() != nil {
			p.mu.Unlock()
			return nil // the consumer is closing: left unsettled for the owner
		}
	}
	if p.closed {
		p.mu.Unlock()
		return nil // left unsettled: the owner releases it on unsubscribe
	}
	p.next++
	tag := p.next
	p.held[tag] = d
	p.mu.Unlock()
	headers := make([]appliance.Header, len(d.Headers))
	for i, h := range d.Headers {
		headers[i] = appliance.Header{Key: h.Key, Value: h.Value}
	}
	p.deliver(appliance.Delivery{Tag: tag, Queue: d.Queue, Partition: d.Partition, Offset: d.Offset,
		Incarnation: d.Incarnation, Deliveries: uint32(d.Deliveries), MessageID: d.ID, Key: d.Key,
		Headers: headers, Body: d.Body, PublishedAt: d.PublishedAt})
	return nil
}

func (p *proxyConsumer) report(err error) {
	p.log.Warn("proxied subscription", "err", err)
}

// AddCredit does nothing: the window is the prefetch given to the owner,
// and it reopens as deliveries are settled.
func (p *proxyConsumer) AddCredit(int) {}

// Ack settles tags as done on the owner.
func (p *proxyConsumer) Ack(tags ...uint64) error {
	return p.settle(tags, (*client.Delivery).Ack)
}

// Nack settles tags as not done on the owner, requeued or discarded.
func (p *proxyConsumer) Nack(requeue bool, tags ...uint64) error {
	return p.settle(tags, func(d *client.Delivery) error { return d.Nack(requeue) })
}

// NackDelay settles tags as not done on the owner, which requeues them
// after delay; the owner's subscription stops holding them at once, so
// the prefetch window reopens.
func (p *proxyConsumer) NackDelay(delay time.Duration, tags ...uint64) error {
	return p.settle(tags, func(d *client.Delivery) error { return d.NackDelay(delay) })
}

// Extend starts the owner's ack deadline over for tags, which stay held.
func (p *proxyConsumer) Extend(tags ...uint64) error {
	return p.apply(tags, false, (*client.Delivery).InProgress)
}

// settle hands each held tag's settle to the owner's connection; tags not
// held, and deliveries whose connection to the owner has ended since (the
// owner redelivers those), are stale.
func (p *proxyConsumer) settle(tags []uint64, settle func(*client.Delivery) error) error {
	return p.apply(tags, true, settle)
}

// apply hands each held tag's delivery to do: a settle (settles set: the
// tag is no longer held) or an extension. Tags not held, and deliveries
// whose connection to the owner has ended since (the owner redelivers
// those), are stale. A verb the owner's protocol version lacks (the
// client's ErrInvalid, before anything is sent) leaves the tag held and
// fails the call as invalid.
func (p *proxyConsumer) apply(tags []uint64, settles bool, do func(*client.Delivery) error) error {
	var stale []uint64
	var refused error
	for _, tag := range tags {
		p.mu.Lock()
		d, ok := p.held[tag]
		if settles {
			delete(p.held, tag)
		}
		p.mu.Unlock()
		if !ok {
			stale = append(stale, tag)
			continue
		}
		err := do(d)
		switch {
		case err == nil:
		case errors.Is(err, client.ErrInvalid):
			if settles {
				p.mu.Lock()
				if !p.closed {
					p.held[tag] = d
				}
				p.mu.Unlock()
			}
			refused = fmt.Errorf("%w: queue %s on node %s: %v", appliance.ErrInvalid, p.queue, p.owner, err)
		default:
			if !errors.Is(err, client.ErrStaleDelivery) && !errors.Is(err, client.ErrAlreadySettled) {
				p.log.Warn("proxied settle failed", "tag", tag, "err", err)
			}
			stale = append(stale, tag)
		}
	}
	if refused != nil {
		return refused
	}
	if len(stale) > 0 {
		return &appliance.StaleTagsError{Tags: stale}
	}
	return nil
}

// Close unsubscribes on the owner, which releases what is unsettled.
func (p *proxyConsumer) Close() {
	if cons := p.stop(); cons != nil {
		cons.Close()
	}
}

// end ends the subscription by itself (see Consume): the client is told,
// and the owner is unsubscribed from in the background (it may be gone).
func (p *proxyConsumer) end(why string) {
	cons := p.stop()
	if cons == nil {
		return // closed or ended before
	}
	p.log.Info("proxied subscription ended; the client subscribes again", "why", why)
	go cons.Close()
	if p.ended != nil {
		// On a goroutine of its own: end may run inside Consume, whose
		// caller holds the lock Ended takes (the server's subscription,
		// until Subscribed is queued, which so goes out first).
		go p.ended()
	}
}

// stop marks p closed and forgets it; it returns the subscription on the
// owner the first time, nil after.
func (p *proxyConsumer) stop() *client.Consumer {
	p.c.proxyMu.Lock()
	delete(p.c.proxies, p)
	p.c.proxyMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.resumeLocked()
	p.held = map[uint64]*client.Delivery{}
	return p.cons
}
