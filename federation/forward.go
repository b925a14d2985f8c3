package federation

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/appliance/wire"
	"github.com/fibril-edge/fibril/federation/control"
)

// forwardTimeout bounds a forwarded publish, dial included.
const forwardTimeout = time.Minute

// lookupWait is how long a request for a queue this node has not heard of
// waits for the declaration to reach it.
const lookupWait = 2 * time.Second

// Owner names the node serving a queue that this node does not serve:
// its id and client address.
//
// A queue declared a moment ago through another node may not have reached
// this node's view yet: an unknown queue waits up to lookupWait for it.
//
// A queue being recovered waits up to recoveryWait for its new owner, and
// a queue this node was just installed to own, for the broker to open it.
// A queue this node keeps local (local.go) is its own; one it hands over
// to the cluster waits, up to recoveryWait, for the hand-over.
func (c *Cluster) Owner(queue string) (id, addr string, ok bool) {
	if c.isLocal(queue) {
		return "", "", false // this node serves its own
	}
	if moved := c.handingOver(queue); moved != nil {
		select { // this node hands its own over to the cluster (local.go)
		case <-moved:
		case <-time.After(recoveryWait):
		case <-c.stop:
		}
	}
	known, settled := false, true
	lookup := func(s *control.State) {
		as, found := s.Assignments[queue]
		known, settled = found, true
		if found && len(as) > 0 && as[0].Sealing {
			settled = false
		}
		if found && len(as) > 0 && as[0].Owner != c.node.opts.ID {
			id, addr, ok = as[0].Owner, s.Members[as[0].Owner].ClientAddr, true
		}
	}
	c.node.read(lookup)
	if !known {
		ctx, cancel := context.WithTimeout(context.Background(), lookupWait)
		defer cancel()
		if c.node.waitFor(ctx, func(s *control.State) bool { _, found := s.Assignments[queue]; return found }) != nil {
			return "", "", false
		}
		c.node.read(lookup)
	}
	if !settled || (!ok && !c.serving(queue)) {
		c.waitSettled(queue)
		c.node.read(lookup)
	}
	return id, addr, ok
}

// Local reports, without waiting, whether this node's broker serves queue
// with nothing under way that a publish would wait for or be forwarded
// through: Forward would return false at once. (A queue this node keeps
// local, or one the cluster assigned it, settled, its broker serving it,
// and no earlier publish still being forwarded.)
func (c *Cluster) Local(queue string) bool {
	if c.forwarding(queue) {
		return false
	}
	if q, ok := c.localQueue(queue); ok {
		return q.moving == nil // kept here, or being handed over
	}
	if !c.serving(queue) {
		return false
	}
	mine := false
	c.node.read(func(s *control.State) { mine = s.OwnedBy(queue, c.node.opts.ID) })
	return mine
}

// serving reports whether the local broker serves queue.
func (c *Cluster) serving(queue string) bool {
	c.fo.mu.Lock()
	defer c.fo.mu.Unlock()
	return c.fo.serving[queue]
}

// waitSettled waits, up to recoveryWait, until queue is not recovering
// and is served by another node or by this node's broker.
func (c *Cluster) waitSettled(queue string) {
	ctx, cancel := context.WithTimeout(context.Background(), recoveryWait)
	defer cancel()
	for {
		changed, served := c.node.Changed(), c.fo.servedCh()
		settled, local := false, false
		c.node.read(func(s *control.State) {
			as := s.Assignments[queue]
			settled = len(as) == 0 || !as[0].Sealing
			local = len(as) > 0 && as[0].Owner == c.node.opts.ID
		})
		if settled && (!local || c.serving(queue)) {
			return
		}
		select {
		case <-changed:
		case <-served:
		case <-ctx.Done():
			return
		case <-c.stop:
			return
		}
	}
}

// Forward publishes m to the node serving queue, over a client connection
// kept per owner, and reports whether it did (false: this node serves the
// queue, or no node does). done gets the owner's confirm, or its error
// mapped back to the broker's sentinels.
//
// Publishes to one queue are forwarded in the order Forward is called, by
// one sender per queue that pipelines them on the owner's connection, so
// a connection publishing through this node sees its confirms in its own
// publish order, as it would on the owner.
//
// A queue this node took over while publishes to it were being forwarded
// (a failover) takes later publishes through the forwarder too, until
// those have completed: they go to this node's broker after the earlier
// ones.
func (c *Cluster) Forward(queue string, m appliance.Message, done func(appliance.Confirm, error)) bool {
	return c.ForwardFrom(nil, queue, m, done)
}

// ForwardFrom is Forward for a publish from a pipelining connection,
// from (any comparable value naming it; nil for none). A forwarded
// publish has an outcome of its own, apart from its connection's: one
// that fails unavailable (the owner's connection lost, the queue moved)
// may be resent by the client after later ones were stored, where on the
// owner the lost connection would have failed them all. So once one of
// from's publishes fails so, every later one of from's to the queue fails
// too, unsent, with appliance.ErrForwardBroken, and the server ends the
// connection; and a publish of from's goes out only on the owner
// connection its predecessor went out on, while that one waits
// (client.PublishAsyncAfter).
func (c *Cluster) ForwardFrom(from any, queue string, m appliance.Message, done func(appliance.Confirm, error)) bool {
	if _, _, ok := c.Owner(queue); !ok && !c.forwarding(queue) {
		return false
	}
	fw, ok := c.queueForwarder(queue)
	if !ok {
		done(appliance.Confirm{}, fmt.Errorf("%w: node closing", appliance.ErrUnavailable))
		return true
	}
	m.Body = bytes.Clone(m.Body) // the caller's is valid only until Forward returns
	ctx, cancel := context.WithTimeout(context.Background(), forwardTimeout)
	fw.pending.Add(1)
	inner := done
	done = func(cf appliance.Confirm, err error) {
		inner(cf, err)
		fw.pending.Add(-1)
	}
	select {
	case fw.requests <- fwdRequest{ctx: ctx, cancel: cancel, from: from, m: m, done: done}:
	case <-c.stop:
		cancel()
		done(appliance.Confirm{}, fmt.Errorf("%w: node closing", appliance.ErrUnavailable))
	}
	return true
}

// fwdRequest is one publish waiting to be forwarded; ctx bounds it from
// the moment it arrived.
type fwdRequest struct {
	ctx    context.Context
	cancel context.CancelFunc
	from   any // the publishing connection; nil for none
	m      appliance.Message
	done   func(appliance.Confirm, error)
}

// fwdSent is a forwarded publish on its way: its confirm comes on f, or
// on local when this node's broker took it.
type fwdSent struct {
	req   fwdRequest
	id    string // the owner it went to
	f     *client.Future
	local <-chan fwdResult
	// completed closes once the publish's done has run.
	completed chan struct{}
}

type fwdResult struct {
	cf  appliance.Confirm
	err error
}

// errServedHere: the queue a publish was forwarded for is served by this
// node now.
var errServedHere = errors.New("the queue is served by this node")

// queueForwarder forwards one queue's publishes in order: send owns the
// requests and writes them to the owner's connection one after the
// other; confirm owns what is sent and completes it in the same order.
type queueForwarder struct {
	requests chan fwdRequest
	sent     chan fwdSent
	pending  atomic.Int64 // publishes taken and not completed

	// prev is each connection's publish sent last, for the next to
	// follow on its owner connection; send's alone.
	prev map[any]*client.Future

	mu     sync.Mutex        // guards broken
	broken map[any]time.Time // connections with a failed publish (ForwardFrom), and when
}

// brokenFor is how long a connection with a failed forwarded publish is
// remembered: past every deadline of a publish it could still send.
const brokenFor = 2 * forwardTimeout

// isBroken reports whether from had a forwarded publish fail.
func (fw *queueForwarder) isBroken(from any) bool {
	if from == nil {
		return false
	}
	fw.mu.Lock()
	defer fw.mu.Unlock()
	_, ok := fw.broken[from]
	return ok
}

// breakFor records that from had a publish fail, forgetting connections
// recorded long ago.
func (fw *queueForwarder) breakFor(from any) {
	if from == nil {
		return
	}
	now := time.Now()
	fw.mu.Lock()
	defer fw.mu.Unlock()
	for k, at := range fw.broken {
		if now.Sub(at) > brokenFor {
			delete(fw.broken, k)
		}
	}
	fw.broken[from] = now
}

// breaksOrder reports whether a forwarded publish's failure could let a
// later one of its connection be stored ahead of its resend: unavailable
// (a refusal, such as a full queue, is final and changes nothing after).
func breaksOrder(err error) bool { return errors.Is(err, appliance.ErrUnavailable) }

// errBrokenBefore fails a publish of a connection whose earlier forwarded
// publish failed.
func errBrokenBefore(queue string) error {
	return fmt.Errorf("%w: an earlier publish of this connection to queue %s failed; this one was not sent, so it cannot overtake that one",
		appliance.ErrForwardBroken, queue)
}

// forwarding reports whether queue has forwarded publishes not completed.
func (c *Cluster) forwarding(queue string) bool {
	c.fwdMu.Lock()
	fw, ok := c.forwarders[queue]
	c.fwdMu.Unlock()
	return ok && fw.pending.Load() > 0
}

// forwardQueueDepth bounds the publishes waiting to be forwarded per
// queue; a full queue holds back the connections publishing to it.
const forwardQueueDepth = 1024

// queueForwarder returns queue's forwarder, starting it the first time;
// false once the node is closing.
func (c *Cluster) queueForwarder(queue string) (*queueForwarder, bool) {
	c.fwdMu.Lock() // Close closes stop under it: no Add after its Wait
	defer c.fwdMu.Unlock()
	select {
	case <-c.stop:
		return nil, false
	default:
	}
	if fw, ok := c.forwarders[queue]; ok {
		return fw, true
	}
	fw := &queueForwarder{requests: make(chan fwdRequest, forwardQueueDepth), sent: make(chan fwdSent, forwardQueueDepth),
		prev: map[any]*client.Future{}, broken: map[any]time.Time{}}
	c.forwarders[queue] = fw
	c.wg.Add(2)
	go c.sendForwarded(queue, fw)
	go c.confirmForwarded(queue, fw)
	return fw, true
}

// sendForwarded sends queue's publishes to its owner in arrival order,
// waiting (each within its own deadline) for an owner that cannot be
// reached; at Close it fails what is still waiting.
func (c *Cluster) sendForwarded(queue string, fw *queueForwarder) {
	defer c.wg.Done()
	defer close(fw.sent)
	var last *fwdSent // the publish sent last
	for {
		var req fwdRequest
		select {
		case req = <-fw.requests:
		case <-c.stop:
			for {
				select {
				case req := <-fw.requests:
					req.cancel()
					req.done(appliance.Confirm{}, fmt.Errorf("%w: node closing", appliance.ErrUnavailable))
				default:
					return
				}
			}
		}
		id, cl, err := c.ownerClient(req.ctx, queue)
		if err == nil || errors.Is(err, errServedHere) {
			target := id
			if err != nil {
				target = c.node.opts.ID
			}
			if last != nil && last.id != target {
				// The queue moved (a failover): what went to the old
				// owner completes first, so confirms keep their order.
				select {
				case <-last.completed:
				case <-req.ctx.Done():
				case <-c.stop:
				}
			}
		}
		if fw.isBroken(req.from) || prevFailed(fw.prev[req.from]) {
			fw.breakFor(req.from)
			req.cancel()
			req.done(appliance.Confirm{}, errBrokenBefore(queue))
			continue
		}
		if errors.Is(err, errServedHere) {
			// This node took the queue over (a failover) since the
			// publish arrived: its broker confirms it, in order.
			local := make(chan fwdResult, 1)
			c.boundBroker().PublishAsync(queue, req.m, func(cf appliance.Confirm, err error) { local <- fwdResult{cf, err} })
			last = &fwdSent{req: req, id: c.node.opts.ID, local: local, completed: make(chan struct{})}
			fw.sent <- *last
			continue
		}
		if err != nil {
			if breaksOrder(err) && req.from != nil {
				fw.breakFor(req.from)
				err = fmt.Errorf("%w: %w", appliance.ErrForwardBroken, err)
			}
			req.cancel()
			req.done(appliance.Confirm{}, err)
			continue
		}
		headers := make([]client.Header, len(req.m.Headers))
		for i, h := range req.m.Headers {
			headers[i] = client.Header{Key: h.Key, Value: h.Value}
		}
		msg := client.Message{ID: req.m.ID, Key: req.m.Key, Headers: headers, Body: req.m.Body}
		var f *client.Future
		if p := fw.prev[req.from]; p != nil && !isDone(p) {
			// Behind its connection's last, on the same owner
			// connection: if that one is lost, this fails with it.
			f = cl.PublishAsyncAfter(req.ctx, p, queue, msg)
		} else {
			f = cl.PublishAsync(queue, msg)
			select {
			case <-f.Done():
				if _, err := f.Result(); errors.Is(err, client.ErrNotConnected) {
					// The owner is reconnecting: wait for it, but not
					// past the moment it loses the queue to a failover.
					ctx, stop := c.whileOwner(req.ctx, queue, id)
					f = cl.PublishAsyncContext(ctx, queue, msg)
					stop()
				}
			default:
			}
		}
		if req.from != nil {
			fw.notePrev(req.from, f)
		}
		last = &fwdSent{req: req, id: id, f: f, completed: make(chan struct{})}
		fw.sent <- *last
	}
}

// maxPrev bounds the connections whose last publish a forwarder keeps;
// past it those whose last one succeeded are forgotten (the next one of
// theirs starts afresh, as it would), and so are those recorded broken
// (broken says it for them from then on).
const maxPrev = 1024

// notePrev keeps f as from's last publish sent; send's alone.
func (fw *queueForwarder) notePrev(from any, f *client.Future) {
	if len(fw.prev) >= maxPrev {
		for k, p := range fw.prev {
			if isDone(p) && (!prevFailed(p) || fw.isBroken(k)) {
				delete(fw.prev, k)
			}
		}
	}
	fw.prev[from] = f
}

// isDone reports whether f has its outcome.
func isDone(f *client.Future) bool {
	select {
	case <-f.Done():
		return true
	default:
		return false
	}
}

// prevFailed reports whether a connection's last forwarded publish f
// failed so that a later one could overtake it.
func prevFailed(f *client.Future) bool {
	if f == nil || !isDone(f) {
		return false
	}
	_, err := f.Result()
	return err != nil && breaksOrder(brokerError(err))
}

// confirmForwarded completes sent publishes in the order they were sent.
//
// A publish sent to an owner that loses the queue (a recovery started, or
// another node owns it now) fails as unavailable without waiting for that
// owner: it can confirm nothing more, and the client retries it with its
// message id.
func (c *Cluster) confirmForwarded(queue string, fw *queueForwarder) {
	defer c.wg.Done()
	for s := range fw.sent {
		var cf appliance.Confirm
		var err error
		if s.local != nil {
			r := <-s.local
			cf, err = r.cf, r.err
		} else {
			var ccf client.Confirm
			ccf, err = c.forwardedResult(queue, s)
			if err != nil {
				err = fmt.Errorf("forwarded to node %s: %w", s.id, brokerError(err))
			}
			cf = appliance.Confirm{Partition: ccf.Partition, Offset: ccf.Offset, Duplicate: ccf.Duplicate, Durability: ccf.Durability}
		}
		if err != nil && s.req.from != nil && breaksOrder(err) {
			fw.breakFor(s.req.from)
			err = fmt.Errorf("%w: %w", appliance.ErrForwardBroken, err)
		}
		s.req.cancel()
		s.req.done(cf, err)
		close(s.completed)
	}
}

// ownerMoved reports whether id has lost queue: a recovery started, or
// another node owns it.
func (c *Cluster) ownerMoved(queue, id string) bool {
	moved := false
	c.node.read(func(st *control.State) {
		as := st.Assignments[queue]
		moved = len(as) > 0 && (as[0].Sealing || as[0].Owner != id)
	})
	return moved
}

// whileOwner is ctx, also cancelled once id no longer owns queue (a
// recovery started or another node owns it); stop releases it.
func (c *Cluster) whileOwner(ctx context.Context, queue, id string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		for {
			changed := c.node.Changed()
			if c.ownerMoved(queue, id) {
				cancel()
				return
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return
			case <-c.stop:
				cancel()
				return
			}
		}
	}()
	return ctx, cancel
}

// forwardedResult waits for a forwarded publish's outcome, or for its
// owner to lose the queue.
func (c *Cluster) forwardedResult(queue string, s fwdSent) (client.Confirm, error) {
	for {
		changed := c.node.Changed()
		if c.ownerMoved(queue, s.id) {
			select {
			case <-s.f.Done(): // it may have completed meanwhile
				return s.f.Result()
			default:
			}
			return client.Confirm{}, fmt.Errorf("%w: node %s lost queue %s to a failover before it confirmed the publish",
				client.ErrUnavailable, s.id, queue)
		}
		select {
		case <-s.f.Done():
			return s.f.Result()
		case <-changed:
		}
	}
}

// ownerClient returns the connection to the node serving queue. While
// that node cannot be reached (it may be restarting) it retries with
// backoff until ctx ends, reading the owner's address again each time:
// a restarted node announces the address it listens on now.
func (c *Cluster) ownerClient(ctx context.Context, queue string) (id string, cl *client.Client, err error) {
	delay := 20 * time.Millisecond
	for {
		id, addr, ok := c.Owner(queue)
		if !ok && c.serving(queue) && c.boundBroker() != nil {
			return "", nil, errServedHere
		}
		if !ok {
			return "", nil, fmt.Errorf("%w: queue %s has no serving node", appliance.ErrNotFound, queue)
		}
		cl, err := c.forwardClient(ctx, id, addr)
		if err == nil {
			return id, cl, nil
		}
		if errors.Is(err, ErrClosed) {
			return id, nil, fmt.Errorf("%w: node closing", appliance.ErrUnavailable)
		}
		select {
		case <-ctx.Done():
			return id, nil, fmt.Errorf("%w: queue %s is served by node %s at %s, which this node cannot reach: %w",
				appliance.ErrUnavailable, queue, id, addr, err)
		case <-c.stop:
			return id, nil, fmt.Errorf("%w: node closing", appliance.ErrUnavailable)
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

// forwardClient returns the connection to node id's client listener at
// addr, dialling it the first time.
func (c *Cluster) forwardClient(ctx context.Context, id, addr string) (*client.Client, error) {
	key := id + "@" + addr
	c.fwdMu.Lock()
	defer c.fwdMu.Unlock()
	if cl, ok := c.forward[key]; ok {
		return cl, nil
	}
	select {
	case <-c.stop:
		return nil, ErrClosed
	default:
	}
	opts := c.forwardOpts
	if c.fwdNamed && opts.TLS != nil {
		opts.TLS = namingNode(opts.TLS, id, addr)
	}
	cl, err := client.Dial(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	c.forward[key] = cl
	return cl, nil
}

// namingNode is cfg that also refuses a peer whose certificate does not
// name node id (its common name): the token a forwarded publish carries
// goes to that node only.
func namingNode(cfg *tls.Config, id, addr string) *tls.Config {
	cfg = cfg.Clone()
	verify := cfg.VerifyConnection
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if verify != nil {
			if err := verify(cs); err != nil {
				return err
			}
		}
		if len(cs.PeerCertificates) == 0 || cs.PeerCertificates[0].Subject.CommonName != id {
			got := ""
			if len(cs.PeerCertificates) > 0 {
				got = cs.PeerCertificates[0].Subject.CommonName
			}
			return fmt.Errorf("%w: the client listener at %s presents a certificate for node %q, not %q", ErrWrongPeer, addr, got, id)
		}
		return nil
	}
	return cfg
}

// brokerError maps a client error from the owner to the broker sentinel
// the local server answers with: the owner's wire code read back through
// the broker's error catalog, so a forwarded refusal keeps its code. A
// failure without a code (the connection) is unavailable, and so is a
// code no class has (the owner refused this node's token).
func brokerError(err error) error {
	var ce *client.Error
	switch {
	case errors.As(err, &ce) && ce.Code == wire.CodeInternal:
		return err // the owner failed unexpectedly: internal here too
	case errors.As(err, &ce):
		return fmt.Errorf("%w: %w", appliance.SentinelForWire(ce.Code), err)
	}
	return fmt.Errorf("%w: %w", appliance.ErrUnavailable, err)
}

// closeForwarding closes the connections to other nodes.
func (c *Cluster) closeForwarding() {
	c.fwdMu.Lock()
	defer c.fwdMu.Unlock()
	for key, cl := range c.forward {
		cl.Close()
		delete(c.forward, key)
	}
}
