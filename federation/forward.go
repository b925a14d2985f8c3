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
func (c *Cluster) Forward(queue string, m appliance.Message, done func(appliance.Confirm, error)) bool {
	if _, _, ok := c.Owner(queue); !ok {
		return false
	}
	c.fwdMu.Lock() // Close closes stop under it: no Add after its Wait
	select {
	case <-c.stop:
		c.fwdMu.Unlock()
		done(appliance.Confirm{}, fmt.Errorf("%w: node closing", appliance.ErrUnavailable))
		return true
	default:
	}
	c.wg.Add(1)
	c.fwdMu.Unlock()
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), forwardTimeout)
		defer cancel()
		id, cl, err := c.ownerClient(ctx, queue)
		if err != nil {
			done(appliance.Confirm{}, err)
			return
		}
		headers := make([]client.Header, len(m.Headers))
		for i, h := range m.Headers {
			headers[i] = client.Header{Key: h.Key, Value: h.Value}
		}
		cf, err := cl.Publish(ctx, queue, client.Message{ID: m.ID, Key: m.Key, Headers: headers, Body: m.Body})
		if err != nil {
			done(appliance.Confirm{}, fmt.Errorf("forwarded to node %s: %w", id, brokerError(err)))
			return
		}
		done(appliance.Confirm{Partition: cf.Partition, Offset: cf.Offset, Duplicate: cf.Duplicate}, nil)
	}()
	return true
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
