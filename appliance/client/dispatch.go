package client

import (
	"errors"
	"fmt"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// Deliveries go from the connection's reader into the Consumer's buffer
// (push never blocks: the broker sends at most the prefetch window), and
// from there to the handler goroutines or the Messages channel (next).
// When a connection is lost its deliveries still in the buffer are
// dropped; the broker redelivers them.

// push queues a delivery from cn's reader goroutine. It never blocks: the
// broker sends at most the prefetch window of unsettled deliveries.
func (s *Consumer) push(cn *conn, f *wire.Deliver) {
	d := &Delivery{
		Queue:       s.queue,
		ID:          f.MessageID,
		Key:         f.Key,
		Headers:     f.Headers,
		Body:        f.Body,
		Partition:   int(f.Partition),
		Offset:      f.Offset,
		Incarnation: f.Incarnation,
		Deliveries:  int(f.Deliveries),
		Tag:         f.Tag,
		consumer:    s,
		conn:        cn,
	}
	if f.PublishedAt != 0 {
		d.PublishedAt = time.Unix(0, f.PublishedAt)
	}
	s.mu.Lock()
	if s.state != subActive || s.conn != cn {
		s.mu.Unlock()
		return // closing: the broker releases it
	}
	d.gen = s.gen
	s.buf = append(s.buf, d)
	s.mu.Unlock()
	s.signal()
}

func (s *Consumer) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// next takes the next delivery to hand out, skipping stale ones; false
// once the Consumer stops.
func (s *Consumer) next() (*Delivery, bool) {
	for {
		select {
		case <-s.stop:
			return nil, false
		default:
		}
		s.mu.Lock()
		for len(s.buf) > 0 {
			d := s.buf[0]
			s.buf[0] = nil
			s.buf = s.buf[1:]
			if d.conn.dead.Load() {
				continue
			}
			more := len(s.buf) > 0
			s.mu.Unlock()
			if more {
				s.signal() // for the other workers
			}
			return d, true
		}
		s.buf = nil
		s.mu.Unlock()
		select {
		case <-s.wake:
		case <-s.stop:
			return nil, false
		}
	}
}

// pump hands deliveries to Messages (channel mode).
func (s *Consumer) pump() {
	defer close(s.stopped)
	defer close(s.msgs)
	for {
		d, ok := s.next()
		if !ok {
			return
		}
		select {
		case s.msgs <- d:
		case <-s.stop:
			return // unsettled: released when the subscription ends
		}
	}
}

// work runs the handler on deliveries (handler mode).
func (s *Consumer) work() {
	for {
		d, ok := s.next()
		if !ok {
			return
		}
		s.handle(d)
	}
}

func (s *Consumer) handle(d *Delivery) {
	err := s.handler(s.hctx, d)
	if s.manual {
		if err != nil {
			s.report(fmt.Errorf("client: handler for queue %s, tag %d: %w", s.queue, d.Tag, err))
		}
		return
	}
	if d.settled.Load() {
		return
	}
	var serr error
	switch {
	case err == nil:
		serr = d.Ack()
	case errors.Is(err, ErrDiscard):
		serr = d.Nack(false)
	default:
		serr = d.Nack(true)
	}
	if serr != nil && !errors.Is(serr, ErrAlreadySettled) {
		s.report(serr)
	}
}

// report passes an error to OnError, or logs it.
func (s *Consumer) report(err error) {
	if s.onError != nil {
		s.onError(err)
		return
	}
	if errors.Is(err, ErrStaleDelivery) {
		s.c.log.Debug("fibril: consumer", "queue", s.queue, "err", err)
		return
	}
	s.c.log.Warn("fibril: consumer", "queue", s.queue, "err", err)
}
