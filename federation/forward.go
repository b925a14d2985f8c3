package federation

import (
	"context"
	"errors"
	"fmt"
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
func (c *Cluster) Owner(queue string) (id, addr string, ok bool) {
	known := false
	lookup := func(s *control.State) {
		as, found := s.Assignments[queue]
		known = found
		if found && len(as) > 0 && as[0].Owner != c.node.opts.ID {
			id, addr, ok = as[0].Owner, s.Members[as[0].Owner].ClientAddr, true
		}
	}
	c.node.read(lookup)
	if known {
		return id, addr, ok
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupWait)
	defer cancel()
	if c.node.waitFor(ctx, func(s *control.State) bool { _, found := s.Assignments[queue]; return found }) != nil {
		return "", "", false
	}
	c.node.read(lookup)
	return id, addr, ok
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
func (c *Cluster) Forward(queue string, m appliance.Message, done func(appliance.Confirm, error)) bool {
	if _, _, ok := c.Owner(queue); !ok {
		return false
	}
	fw, ok := c.queueForwarder(queue)
	if !ok {
		done(appliance.Confirm{}, fmt.Errorf("%w: node closing", appliance.ErrUnavailable))
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), forwardTimeout)
	select {
	case fw.requests <- fwdRequest{ctx: ctx, cancel: cancel, m: m, done: done}:
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
	m      appliance.Message
	done   func(appliance.Confirm, error)
}

// fwdSent is a forwarded publish on its way: its confirm comes on f.
type fwdSent struct {
	req fwdRequest
	id  string // the owner it went to
	f   *client.Future
}

// queueForwarder forwards one queue's publishes in order: send owns the
// requests and writes them to the owner's connection one after the
// other; confirm owns what is sent and completes it in the same order.
type queueForwarder struct {
	requests chan fwdRequest
	sent     chan fwdSent
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
	fw := &queueForwarder{requests: make(chan fwdRequest, forwardQueueDepth), sent: make(chan fwdSent, forwardQueueDepth)}
	c.forwarders[queue] = fw
	c.wg.Add(2)
	go c.sendForwarded(queue, fw)
	go c.confirmForwarded(fw)
	return fw, true
}

// sendForwarded sends queue's publishes to its owner in arrival order,
// waiting (each within its own deadline) for an owner that cannot be
// reached; at Close it fails what is still waiting.
func (c *Cluster) sendForwarded(queue string, fw *queueForwarder) {
	defer c.wg.Done()
	defer close(fw.sent)
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
		if err != nil {
			req.cancel()
			req.done(appliance.Confirm{}, err)
			continue
		}
		headers := make([]client.Header, len(req.m.Headers))
		for i, h := range req.m.Headers {
			headers[i] = client.Header{Key: h.Key, Value: h.Value}
		}
		f := cl.PublishAsyncContext(req.ctx, queue, client.Message{ID: req.m.ID, Key: req.m.Key, Headers: headers, Body: req.m.Body})
		fw.sent <- fwdSent{req: req, id: id, f: f}
	}
}

// confirmForwarded completes sent publishes in the order they were sent.
func (c *Cluster) confirmForwarded(fw *queueForwarder) {
	defer c.wg.Done()
	for s := range fw.sent {
		cf, err := s.f.Result() // every Future completes: confirm, refusal, or a lost connection
		s.req.cancel()
		if err != nil {
			s.req.done(appliance.Confirm{}, fmt.Errorf("forwarded to node %s: %w", s.id, brokerError(err)))
			continue
		}
		s.req.done(appliance.Confirm{Partition: cf.Partition, Offset: cf.Offset, Duplicate: cf.Duplicate}, nil)
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
		if !ok {
			return "", nil, fmt.Errorf("%w: queue %s has no serving node", appliance.ErrNotFound, queue)
		}
		cl, err := c.forwardClient(ctx, addr)
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

// forwardClient returns the connection to the client listener at addr,
// dialling it the first time.
func (c *Cluster) forwardClient(ctx context.Context, addr string) (*client.Client, error) {
	c.fwdMu.Lock()
	defer c.fwdMu.Unlock()
	if cl, ok := c.forward[addr]; ok {
		return cl, nil
	}
	select {
	case <-c.stop:
		return nil, ErrClosed
	default:
	}
	cl, err := client.Dial(ctx, addr, c.forwardOpts)
	if err != nil {
		return nil, err
	}
	c.forward[addr] = cl
	return cl, nil
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
	for addr, cl := range c.forward {
		cl.Close()
		delete(c.forward, addr)
	}
}
