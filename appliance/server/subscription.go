package server

import (
	"sync"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/wire"
)

// subscription ties a broker subscription to its SubID on a connection.
type subscription struct {
	c     *conn
	id    uint32
	stats subStats // sessions.go

	// mu guards sub and ended, and is held while a delivery is queued, so
	// that Subscribed goes out before the first Deliver and no Deliver
	// follows Unsubscribed.
	mu    sync.Mutex
	sub   Consumer
	ended bool
	// byBroker: the broker ended it by itself (Ended) and the client was
	// sent Unsubscribed; a Subscribe may take its SubID again.
	byBroker bool
}

// deliver is the broker's Deliver callback. It never waits on the client:
// the frame is queued for the writer. A delivery dropped here (the
// subscription ended or the connection is draining) stays leased until the
// subscription closes, which makes it ready again without counting it.
func (s *subscription) deliver(d appliance.Delivery) {
	defer s.c.recoverPanic("deliver callback")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.c.noDeliver.Load() {
		return
	}
	f := &wire.Deliver{
		SubID: s.id, Tag: d.Tag, Partition: uint16(d.Partition), Offset: d.Offset, Incarnation: d.Incarnation,
		Deliveries: d.Deliveries, MessageID: d.MessageID, Key: d.Key, Headers: fromHeaders(d.Headers), Body: d.Body,
	}
	if !d.PublishedAt.IsZero() {
		f.PublishedAt = d.PublishedAt.UnixNano()
	}
	if n := f.FrameLenIn(s.c.stats.version); n > s.c.s.opts.MaxFrame {
		// Publishes that would not fit are refused, but a dead-letter copy
		// gains headers, and a message stored before version 6 may be up
		// to PublishedAt's 8 bytes too long for a client of version 6.
		// Discard it rather than lease it forever.
		s.c.log.Error("message does not fit a Deliver frame; discarding it", "queue", d.Queue,
			"partition", d.Partition, "offset", d.Offset, "frame", n, "max_frame", s.c.s.opts.MaxFrame)
		s.sub.Nack(false, d.Tag)
		return
	}
	s.stats.delivered.Add(1)
	if s.c.pushDelivery(f) {
		s.c.s.overBudget(time.Now())
	}
}

// brokerEnded is the subscription's Ended callback: its queue was
// deleted, or this node stopped serving it (a cluster moved it, or the
// owner this node consumed it from lost it). The client is sent an
// unsolicited Unsubscribed (Corr 0) and subscribes again if it wants: a
// queue that moved is then served from its new owner, a deleted one is
// not found.
func (s *subscription) brokerEnded() {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended, s.byBroker = true, true
	s.mu.Unlock()
	s.c.removeLive(s)
	s.c.log.Info("subscription ended by the broker; the client may subscribe again", "sub", s.id)
	s.c.push(&wire.Unsubscribed{SubID: s.id})
}

// endedByBroker reports whether brokerEnded ended s.
func (s *subscription) endedByBroker() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byBroker
}

// end closes the broker subscription: what it holds unsettled is ready
// again, and no Deliver for it is queued after end returns.
func (s *subscription) end() {
	s.mu.Lock()
	s.ended = true
	sub := s.sub
	s.mu.Unlock()
	s.c.removeLive(s)
	if sub != nil {
		sub.Close()
	}
}
