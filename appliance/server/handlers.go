package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/wire"
)

const closingMessage = "the connection is closing; send no new requests"

// handle acts on one frame read after the Hello. It returns false when the
// connection must end.
func (c *conn) handle(f wire.Frame) bool {
	switch f := f.(type) {
	case *wire.Heartbeat:
		return true
	case *wire.Goodbye:
		c.log.Debug("client said goodbye", "reason", clip(f.Reason, 256))
		c.goodbye()
		return true
	case *wire.Declare:
		return c.request(f.Corr, func() wire.Frame { return c.declare(f) })
	case *wire.SetMode:
		return c.request(f.Corr, func() wire.Frame { return c.setMode(f) })
	case *wire.QueueInfo:
		return c.request(f.Corr, func() wire.Frame { return c.queueInfo(f) })
	case *wire.PurgeQueue:
		return c.request(f.Corr, func() wire.Frame { return c.purgeQueue(f) })
	case *wire.DeleteQueue:
		return c.request(f.Corr, func() wire.Frame { return c.deleteQueue(f) })
	case *wire.Publish:
		return c.publish(f)
	case *wire.Subscribe:
		return c.request(f.Corr, func() wire.Frame { return c.subscribe(f) })
	case *wire.Unsubscribe:
		return c.request(f.Corr, func() wire.Frame { return c.unsubscribe(f) })
	case *wire.Credit:
		if s, ok := c.subs[f.SubID]; ok && f.Credit > 0 {
			s.sub.AddCredit(int(f.Credit))
		}
		return true
	case *wire.Ack:
		c.settle(f.SubID, f.Tags, func(s Consumer) error { return s.Ack(f.Tags...) }, settleAck)
		return true
	case *wire.Nack:
		c.settle(f.SubID, f.Tags, func(s Consumer) error { return nack(s, f) }, settleNack)
		return true
	case *wire.Extend:
		c.settle(f.SubID, f.Tags, extend(f.Tags), settleExtend)
		return true
	case *wire.Hello:
		c.violation(wire.CodeBadRequest, "a second Hello")
		return false
	}
	c.violation(wire.CodeBadRequest, fmt.Sprintf("%s is a server-to-client frame", f.Type()))
	return false
}

// request runs a synchronous request (Declare, SetMode, Subscribe,
// Unsubscribe, and the queue management requests) and
// queues its reply (run returns nil if it queued the reply itself).
func (c *conn) request(corr uint64, run func() wire.Frame) bool {
	if corr == 0 {
		c.violation(wire.CodeBadRequest, "a request must have a non-zero Corr")
		return false
	}
	if !c.begin() {
		c.push(&wire.Error{Corr: corr, Code: wire.CodeUnavailable, Message: closingMessage})
		return true
	}
	defer c.end()
	if reply := run(); reply != nil {
		c.push(reply)
	}
	return true
}

func (c *conn) declare(f *wire.Declare) wire.Frame {
	if f.MaxBytes > math.MaxInt64 || f.MaxMessages > math.MaxInt64 {
		return &wire.Error{Corr: f.Corr, Code: wire.CodeBadRequest, Message: "MaxBytes and MaxMessages must be below 2^63"}
	}
	declare := c.s.b.Declare
	if cl := c.s.opts.Cluster; cl != nil {
		declare = cl.Declare
	}
	res, err := declare(context.Background(), appliance.QueueConfig{
		Name:          f.Queue,
		Durability:    f.Durability,
		Partitions:    int(f.Partitions),
		DeadLetter:    f.DeadLetter,
		MaxDeliveries: int(f.MaxDeliveries),
		AckDeadline:   time.Duration(f.AckDeadlineMillis) * time.Millisecond,
		MaxBytes:      int64(f.MaxBytes),
		MaxMessages:   int64(f.MaxMessages),
		Overflow:      appliance.Overflow(f.Overflow),
		DedupeWindow:  time.Duration(f.DedupeWindowMillis) * time.Millisecond,
		// Version 3: 0 (and so the broker's defaults) from older clients.
		DedupeMaxEntries: int64(min(f.DedupeMaxEntries, math.MaxInt64)),
		DedupeMaxBytes:   int64(min(f.DedupeMaxBytes, math.MaxInt64)),
	})
	if err != nil {
		return c.errorFrame(f.Corr, err)
	}
	return &wire.Declared{
		Corr:       f.Corr,
		Queue:      res.Config.Name,
		Durability: res.Config.Durability,
		Partitions: uint16(res.Config.Partitions),
		Created:    res.Created,
		Warning:    res.Warning,
	}
}

// setMode changes a queue's mode (appliance.Broker.SetMode) and answers
// the declaration in effect.
func (c *conn) setMode(f *wire.SetMode) wire.Frame {
	var cfg appliance.QueueConfig
	var pending bool
	var err error
	if mc, ok := c.s.opts.Cluster.(ModeChanger); ok {
		cfg, pending, err = mc.ChangeMode(context.Background(), f.Queue, f.Durability)
	} else {
		cfg, _, err = c.s.b.SetMode(context.Background(), f.Queue, f.Durability)
	}
	if err != nil {
		return c.errorFrame(f.Corr, err)
	}
	d := &wire.Declared{Corr: f.Corr, Queue: cfg.Name, Durability: cfg.Durability, Partitions: uint16(cfg.Partitions)}
	switch {
	case pending:
		d.Warning = fmt.Sprintf("the change to %s is pending: the queue's owner carries it out once every required copy can follow; "+
			"until then the queue's mode is %s", f.Durability, cfg.Durability)
	case cfg.Durability == appliance.Buffered:
		d.Warning = appliance.BufferedWarning
	}
	return d
}

// publish hands a message to the broker; its Confirm or Error is queued
// from the broker's callback, so many publishes are in flight at once.
func (c *conn) publish(f *wire.Publish) bool {
	if f.Corr == 0 {
		c.violation(wire.CodeBadRequest, "a request must have a non-zero Corr")
		return false
	}
	c.stats.published.Add(1)
	if !c.begin() {
		c.push(&wire.Error{Corr: f.Corr, Code: wire.CodeUnavailable, Message: closingMessage})
		return true
	}
	if n := wire.DeliverLen(f); n > c.s.opts.MaxFrame {
		c.push(&wire.Error{Corr: f.Corr, Code: wire.CodeTooLarge,
			Message: fmt.Sprintf("the message needs a %d-byte Deliver frame; the limit is %d", n, c.s.opts.MaxFrame)})
		c.end()
		return true
	}
	corr := f.Corr
	m := appliance.Message{ID: f.MessageID, Key: f.Key, Headers: toHeaders(f.Headers), Body: f.Body}
	c.route(f.Queue, m, func(cf appliance.Confirm, err error) {
		defer c.end()
		defer c.recoverPanic("publish callback")
		if err != nil {
			c.push(c.errorFrame(corr, err))
			if errors.Is(err, appliance.ErrForwardBroken) {
				c.breakOrder()
			}
			return
		}
		c.stats.confirmed.Add(1)
		c.push(&wire.Confirm{Corr: corr, Partition: uint16(cf.Partition), Offset: cf.Offset, Duplicate: cf.Duplicate,
			Durability: cf.Durability})
	})
	return true
}

// route hands a publish to the local broker through the connection's
// Publisher, or, in a cluster, to the node serving its queue.
func (c *conn) route(queue string, m appliance.Message, done func(appliance.Confirm, error)) {
	if cl := c.s.opts.Cluster; cl != nil && !cl.Local(queue) {
		// Forward may wait; what is held goes first, so it waits for
		// nothing and keeps its place ahead of this publish.
		c.pub.Flush()
		if cl.ForwardFrom(c, queue, m, done) {
			return
		}
	}
	// Read after Local: a queue is local again only once its forwarded
	// publishes completed, and a broken one set the flag before that.
	if c.orderBroken.Load() {
		done(appliance.Confirm{}, fmt.Errorf("%w: an earlier publish of this connection failed; not published, so it cannot overtake that one", appliance.ErrForwardBroken))
		return
	}
	c.pub.PublishAsync(queue, m, done)
}

// breakOrder ends the connection after a forwarded publish failed where
// a later one could overtake its resend: no request is taken from now on,
// and the connection closes once the replies queued so far are written.
// The client sees what a lost owner would have shown it: everything
// unconfirmed failed, to be resent in order on a new connection.
func (c *conn) breakOrder() {
	if c.orderBroken.Swap(true) {
		return
	}
	c.mu.Lock()
	c.draining = true
	c.mu.Unlock()
	c.log.Info("a publish forwarded to its queue's owner failed; closing the connection so that its later publishes cannot overtake the resend")
	c.enqueue(outFrame{frame: &wire.Error{Code: wire.CodeUnavailable,
		Message: "a publish forwarded to its queue's owner failed: resend from the first unconfirmed publish on a new connection"},
		size: 64, closing: true})
}

func (c *conn) subscribe(f *wire.Subscribe) wire.Frame {
	if old, dup := c.subs[f.SubID]; dup {
		if !old.endedByBroker() {
			return &wire.Error{Corr: f.Corr, Code: wire.CodeBadRequest,
				Message: fmt.Sprintf("subscription %d is already active on this connection", f.SubID)}
		}
		delete(c.subs, f.SubID) // the broker ended it: the client subscribes again
		old.end()
	}
	s := &subscription{c: c, id: f.SubID, stats: subStats{queue: f.Queue, prefetch: int(f.Prefetch)}}
	// Hold s until Subscribed is queued: the broker may deliver at once,
	// and Subscribed must go out first.
	s.mu.Lock()
	defer s.mu.Unlock()
	o := appliance.SubscribeOptions{Prefetch: int(f.Prefetch), Deliver: s.deliver, Ended: s.brokerEnded}
	var sub Consumer
	local, err := c.s.b.Subscribe(f.Queue, o)
	if err == nil {
		sub = local
	}
	var parts uint16
	if errors.Is(err, appliance.ErrNotFound) && c.s.opts.Cluster != nil {
		// Another node may serve the queue: consume it there.
		remote, n, ok, rerr := c.s.opts.Cluster.Consume(context.Background(), f.Queue, o)
		if ok {
			sub, err, parts = remote, rerr, uint16(n)
		} else if local, err = c.s.b.Subscribe(f.Queue, o); err == nil {
			// This node owns it, and Consume waited until its broker
			// served it (a queue just declared, or just failed over).
			sub = local
		}
	}
	if err != nil {
		return c.errorFrame(f.Corr, err)
	}
	s.sub = sub
	c.subs[f.SubID] = s
	c.addLive(s, sub)
	if info, err := c.s.b.QueueInfo(f.Queue); err == nil {
		parts = uint16(info.Config.Partitions)
	}
	c.push(&wire.Subscribed{Corr: f.Corr, SubID: f.SubID, Partitions: parts})
	return nil
}

func (c *conn) unsubscribe(f *wire.Unsubscribe) wire.Frame {
	s, ok := c.subs[f.SubID]
	if !ok {
		return &wire.Error{Corr: f.Corr, Code: wire.CodeNotFound,
			Message: fmt.Sprintf("no subscription %d on this connection", f.SubID)}
	}
	delete(c.subs, f.SubID)
	s.end()
	return &wire.Unsubscribed{Corr: f.Corr, SubID: f.SubID}
}

// settleKind says which of a subscription's counters a settle adds to.
type settleKind uint8

const (
	settleAck    settleKind = iota
	settleNack              // with or without requeue, with or without a delay
	settleExtend            // counts nothing: the delivery stays held
)

// nack applies a Nack frame; a delay needs a Consumer that can delay
// (DelayedNacker), and is ignored without Requeue.
func nack(s Consumer, f *wire.Nack) error {
	if !f.Requeue || f.DelayMillis == 0 {
		return s.Nack(f.Requeue, f.Tags...)
	}
	d, ok := s.(DelayedNacker)
	if !ok {
		return errCannotDelay
	}
	return d.NackDelay(time.Duration(f.DelayMillis)*time.Millisecond, f.Tags...)
}

// extend applies an Extend frame through a Consumer that can extend
// (Extender).
func extend(tags []uint64) func(Consumer) error {
	return func(s Consumer) error {
		e, ok := s.(Extender)
		if !ok {
			return errCannotExtend
		}
		return e.Extend(tags...)
	}
}

var (
	errCannotDelay  = fmt.Errorf("%w: this subscription cannot delay a requeue", appliance.ErrInvalid)
	errCannotExtend = fmt.Errorf("%w: this subscription cannot extend a lease", appliance.ErrInvalid)
)

// settle applies an Ack, Nack or Extend and answers every tag that could
// not be settled (or extended) with a SettleError.
func (c *conn) settle(subID uint32, tags []uint64, apply func(Consumer) error, kind settleKind) {
	if len(tags) == 0 {
		return
	}
	s, ok := c.subs[subID]
	if !ok {
		msg := fmt.Sprintf("subscription %d is not active on this connection", subID)
		for _, t := range tags {
			c.push(&wire.SettleError{SubID: subID, Tag: t, Code: wire.CodeStaleTag, Message: msg})
		}
		return
	}
	err := apply(s.sub)
	count := func(n int) {
		switch kind {
		case settleAck:
			s.stats.acked.Add(uint64(n))
		case settleNack:
			s.stats.nacked.Add(uint64(n))
		}
	}
	if err == nil {
		count(len(tags))
		return
	}
	var stale *appliance.StaleTagsError
	if errors.As(err, &stale) {
		count(max(0, len(tags)-len(stale.Tags)))
		for _, t := range stale.Tags {
			c.push(&wire.SettleError{SubID: subID, Tag: t, Code: wire.CodeStaleTag,
				Message: fmt.Sprintf("tag %d is unknown, stale or already settled on subscription %d", t, subID)})
		}
		return
	}
	code, msg := CodeOf(err), clip(err.Error(), 1024)
	if code == wire.CodeInternal {
		c.log.Error("settle failed", "sub", subID, "err", err)
	}
	for _, t := range tags {
		c.push(&wire.SettleError{SubID: subID, Tag: t, Code: code, Message: msg})
	}
}

func toHeaders(hs []wire.Header) []appliance.Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]appliance.Header, len(hs))
	for i, h := range hs {
		out[i] = appliance.Header{Key: h.Key, Value: h.Value}
	}
	return out
}

func fromHeaders(hs []appliance.Header) []wire.Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]wire.Header, len(hs))
	for i, h := range hs {
		out[i] = wire.Header{Key: h.Key, Value: h.Value}
	}
	return out
}
