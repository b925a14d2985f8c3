package server

import (
	"sync"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/wire"
)

// subscription ties a broker subscription to its SubID on a connection.
type subscription struct {
	c  *conn
	id uint32

	// mu guards sub and ended, and is held while a delivery is queued, so
	// that Subscribed goes out before the first Deliver and no Deliver
	// follows Unsubscribed.
	mu    sync.Mutex
	sub   Consumer
	ended bool
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
	if n := f.FrameLen(); n > s.c.s.opts.MaxFrame {
		// Publishes that would not fit are refused, but a dead-letter copy
		// gains headers. Discard it rather than lease it forever.
		s.c.log.Error("message does not fit a Deliver frame; discarding it", "queue", d.Queue,
			"partition", d.Partition, "offset", d.Offset, "frame", n, "max_frame", s.c.s.opts.MaxFrame)
		s.sub.Nack(false, d.Tag)
		return
	}
	if s.c.pushDelivery(f) {
		s.c.s.overBudget(time.Now())
	}
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
