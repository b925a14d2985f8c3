package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// A Consumer's subscription outlives connections. Its states:
//
//	pending --Subscribed--> active --Close or fatal error--> closed
//	                          |  ^
//	        connection lost   |  |  Subscribed on the new connection
//	        (conn = nil)      v  |  (resubscribe, by the supervisor)
//	                        active, not subscribed
//
// Subscribed and Deliver frames are handled on the connection's reader
// goroutine, which owns conn.subs. A Subscribed that arrives for a
// Consumer closed meanwhile is answered with an Unsubscribe.

// subscribeFirst sends the first Subscribe, on the current connection or
// the next one, until it is answered or ctx ends.
func (s *Consumer) subscribeFirst(ctx context.Context) error {
	for {
		ch := make(chan error, 1)
		sub := &wire.Subscribe{SubID: s.id, Queue: s.queue, Prefetch: s.prefetch}
		var cn *conn
		err := s.c.send(ctx, true, sub, &sub.Corr, func(c *conn) error { cn = c; return nil },
			func(f wire.Frame, err error) { ch <- s.subscribedFirst(cn, f, err) })
		if err != nil {
			return err
		}
		select {
		case err := <-ch:
			if errors.Is(err, ErrConnectionLost) && !errors.Is(err, ErrClosed) {
				continue // not subscribed; try the next connection
			}
			return err
		case <-ctx.Done():
			return ctx.Err() // shutdown unsubscribes if it got through
		}
	}
}

// subscribedFirst handles the answer to the first Subscribe.
func (s *Consumer) subscribedFirst(cn *conn, f wire.Frame, err error) error {
	if err != nil {
		return err
	}
	ok, isOK := f.(*wire.Subscribed)
	if !isOK {
		return fmt.Errorf("unexpected answer %s", f.Type())
	}
	// Register before activating, so that a Client.Close from now on
	// finds the Consumer.
	s.c.mu.Lock()
	closed := s.c.closed
	if !closed {
		s.c.subs[s.id] = s
	}
	s.c.mu.Unlock()
	if closed {
		s.mu.Lock()
		s.state = subClosed
		s.mu.Unlock()
	}
	if !s.activate(cn, ok) {
		s.c.mu.Lock()
		delete(s.c.subs, s.id)
		s.c.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// activate records a Subscribed; it runs on cn's reader goroutine. A
// Consumer closed meanwhile is unsubscribed again.
func (s *Consumer) activate(cn *conn, ok *wire.Subscribed) bool {
	s.mu.Lock()
	s.subscribing = false
	if s.state == subClosed || cn.dead.Load() {
		s.mu.Unlock()
		u := &wire.Unsubscribe{SubID: s.id}
		cn.sendLater(u, &u.Corr)
		return false
	}
	s.state, s.conn, s.partitions, s.attempt = subActive, cn, int(ok.Partitions), 0
	s.mu.Unlock()
	cn.subs[s.id] = s
	return true
}

// resubscribe subscribes an active Consumer again on a new connection.
func (s *Consumer) resubscribe(cn *conn) {
	s.mu.Lock()
	if s.state != subActive || s.conn != nil || s.subscribing {
		s.mu.Unlock()
		return
	}
	s.subscribing = true
	s.mu.Unlock()
	sub := &wire.Subscribe{SubID: s.id, Queue: s.queue, Prefetch: s.prefetch}
	err := cn.request(s.c.life, sub, &sub.Corr, func(f wire.Frame, err error) { s.resubscribed(cn, f, err) })
	if err != nil { // the connection is gone; the next one resubscribes
		s.mu.Lock()
		s.subscribing = false
		s.mu.Unlock()
	}
}

func (s *Consumer) resubscribed(cn *conn, f wire.Frame, err error) {
	if err == nil {
		if ok, isOK := f.(*wire.Subscribed); isOK {
			s.activate(cn, ok)
			return
		}
		err = fmt.Errorf("unexpected answer %s", f.Type())
	}
	s.mu.Lock()
	s.subscribing = false
	if s.state != subActive {
		s.mu.Unlock()
		return
	}
	var e *Error
	switch {
	case errors.Is(err, ErrConnectionLost):
		s.mu.Unlock() // the next connection resubscribes
	case errors.As(err, &e) && e.Retryable():
		wait := backoff(s.attempt, s.c.opts.InitialBackoff, s.c.opts.MaxBackoff)
		s.attempt++
		s.retry = time.AfterFunc(wait, func() { s.resubscribe(cn) })
		s.mu.Unlock()
		s.report(fmt.Errorf("client: resubscribe to %s: %w (retrying in %v)", s.queue, err, wait))
	default:
		s.mu.Unlock()
		err = fmt.Errorf("client: resubscribe to %s: %w", s.queue, err)
		s.report(err)
		s.c.wg.Go(func() { s.shutdown(err, false) })
	}
}

// brokerEnded handles an unasked Unsubscribed on cn: the broker ended the
// subscription by itself (its queue moved to another node, or was
// deleted). The deliveries received under it are stale; the Consumer
// subscribes again on cn after a backoff, which reaches a queue that moved
// at its new owner, and ends with ErrNotFound if the queue is gone. It
// runs on cn's reader goroutine.
func (s *Consumer) brokerEnded(cn *conn) {
	s.mu.Lock()
	if s.state != subActive || s.conn != cn {
		s.mu.Unlock()
		return
	}
	s.conn, s.buf = nil, nil
	s.gen++
	wait := backoff(s.attempt, s.c.opts.InitialBackoff, s.c.opts.MaxBackoff)
	s.attempt++
	s.retry = time.AfterFunc(wait, func() { s.resubscribe(cn) })
	s.mu.Unlock()
	s.c.log.Info("fibril: the broker ended a subscription (its queue moved or was deleted); subscribing again",
		"queue", s.queue, "addr", cn.addr, "in", wait)
}

// endedSince reports whether the broker ended the subscription a delivery
// of generation gen came under.
func (s *Consumer) endedSince(gen uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen != gen
}

// connLost drops the deliveries of cn not yet handed out; the broker
// releases them.
func (s *Consumer) connLost(cn *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == cn {
		s.conn, s.buf = nil, nil
	}
}
