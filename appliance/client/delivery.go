package client

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Delivery is one message handed to a consumer. Settle it once, with Ack,
// Nack or NackDelay (a handler in automatic mode settles by its return
// value). Until it is settled it counts against the consumer's prefetch,
// and its lease runs for the queue's ack deadline (InProgress starts it
// over); past that the broker redelivers the message and the tag is
// stale.
type Delivery struct {
	Queue     string
	ID        string // the Message.ID it was published with
	Key       string // the Message.Key it was published with ("" from a broker of protocol version 1)
	Headers   []Header
	Body      []byte
	Partition int    // from 0
	Offset    uint64 // in the partition's log; increasing within a partition
	// Incarnation is the incarnation of the partition log the message was
	// written in. The log starts a new incarnation whenever it may have
	// been cut back below offsets it had delivered (a power cut of a
	// buffered queue, a crash), after which new messages reuse those
	// offsets; a message that survived keeps the incarnation it was
	// written in. So Partition, Offset and Incarnation together name one
	// message, across restarts of the broker (not across a failover to
	// another node's copy, which counts its own incarnations). 0 from a
	// broker of protocol version 1.
	Incarnation uint64
	Deliveries  int    // 1 on the first delivery, then 2, 3, …
	Tag         uint64 // the broker's delivery tag, valid on this connection only
	// PublishedAt is when the queue's owner took the publish, by its
	// clock; zero from a broker of protocol version 5 or older.
	PublishedAt time.Time

	consumer *Consumer
	conn     *conn  // the connection it arrived on
	gen      uint64 // the consumer's subscription on conn it arrived under
	settled  atomic.Bool
}

// Redelivered reports whether the message was delivered before.
func (d *Delivery) Redelivered() bool { return d.Deliveries > 1 }

// Header returns the value of the first header named key.
func (d *Delivery) Header(key string) (string, bool) {
	for _, h := range d.Headers {
		if h.Key == key {
			return h.Value, true
		}
	}
	return "", false
}

// Ack settles the delivery as done: the message is removed from the
// queue for good. Acks are batched: Ack only queues the tag for the
// connection's writer, which sends it at once when idle and together with
// others when busy. It returns ErrStaleDelivery if the delivery's
// connection has ended or its Consumer is closed (the broker releases the
// message for redelivery; nothing is sent), and ErrAlreadySettled on a
// second settle. A tag the broker cannot settle (its lease expired) is
// reported later to SubscribeOptions.OnError.
func (d *Delivery) Ack() error { return d.settle(settleAck) }

// Nack settles the delivery as not done: with requeue the broker releases
// the message for redelivery (Deliveries one higher; past the queue's
// MaxDeliveries it goes to the dead-letter queue); without, it discards
// it (to the dead-letter queue if one is declared). Batched and with the
// same errors as Ack.
func (d *Delivery) Nack(requeue bool) error {
	if requeue {
		return d.settle(settleRequeue)
	}
	return d.settle(settleDiscard)
}

// NackDelay settles the delivery as not done and has the broker requeue
// the message after d, not before: it is then delivered again as after
// Nack(true) (Deliveries one higher, up to the queue's MaxDeliveries).
// The consumer stops holding it at once: it no longer counts against the
// prefetch, so other messages come meanwhile. The delay is kept in the
// broker's memory only: a broker restart, or the queue moving to another
// node of a cluster, makes the message ready at once. d is rounded up to
// a millisecond; d <= 0 is Requeue. Batched and with the same errors as
// Ack, and ErrInvalid, with the delivery left unsettled, from a broker
// older than protocol version 5 or for d over MaxNackDelay.
func (d *Delivery) NackDelay(delay time.Duration) error {
	if delay <= 0 {
		return d.Requeue()
	}
	if delay > MaxNackDelay {
		return fmt.Errorf("%w: nack delay %v exceeds %v", ErrInvalid, delay, MaxNackDelay)
	}
	if err := d.needVersion5("delay a requeue"); err != nil {
		return err
	}
	return d.settleDelay(settleRequeue, uint32((delay+time.Millisecond-1)/time.Millisecond))
}

// MaxNackDelay is the longest delay NackDelay takes: the protocol carries
// it in milliseconds, in 32 bits.
const MaxNackDelay = math.MaxUint32 * time.Millisecond

// InProgress tells the broker the delivery is still being worked on: its
// ack deadline starts over, running the queue's ack deadline from when
// the broker reads this, so a slow handler keeps the message. It settles
// nothing: call it as often as needed, then Ack or Nack. Batched like Ack.
// It returns ErrAlreadySettled after a settle, ErrStaleDelivery as Ack
// does, and ErrInvalid from a broker older than protocol version 5. A tag
// the broker no longer holds (the lease expired already) is reported
// later to SubscribeOptions.OnError, as for Ack.
func (d *Delivery) InProgress() error {
	if d.consumer == nil {
		return fmt.Errorf("%w: extension of a Delivery the client did not make", ErrInvalid)
	}
	if d.settled.Load() {
		return fmt.Errorf("client: tag %d: %w", d.Tag, ErrAlreadySettled)
	}
	if err := d.needVersion5("extend a lease"); err != nil {
		return err
	}
	return d.send(settleExtend, 0)
}

// Stale reports, without sending anything, whether the delivery can no
// longer be settled: settled already, its consumer closed, or its
// subscription or connection ended (the broker then delivers the message
// again). A holder that acts on a message only while it is still the
// holder's checks it first.
func (d *Delivery) Stale() bool {
	if d.consumer == nil {
		return false
	}
	return d.settled.Load() || d.consumer.isClosed() || d.consumer.endedSince(d.gen) || (d.conn != nil && d.conn.ended())
}

// needVersion5 refuses what a broker older than protocol version 5 cannot
// do, before anything is marked or sent.
func (d *Delivery) needVersion5(what string) error {
	if d.conn != nil && d.conn.version < 5 {
		return fmt.Errorf("%w: the broker speaks protocol version %d, which cannot %s (version 5 can)",
			ErrInvalid, d.conn.version, what)
	}
	return nil
}

// Requeue releases the message for redelivery: Nack(true), by name.
func (d *Delivery) Requeue() error { return d.settle(settleRequeue) }

// Reject discards the message, to the dead-letter queue if the queue
// declares one: Nack(false), by name.
func (d *Delivery) Reject() error { return d.settle(settleDiscard) }

func (d *Delivery) settle(kind settleKind) error { return d.settleDelay(kind, 0) }

func (d *Delivery) settleDelay(kind settleKind, delayMillis uint32) error {
	if d.consumer == nil {
		return fmt.Errorf("%w: settle of a Delivery the client did not make", ErrInvalid)
	}
	if !d.settled.CompareAndSwap(false, true) {
		return fmt.Errorf("client: tag %d: %w", d.Tag, ErrAlreadySettled)
	}
	return d.send(kind, delayMillis)
}

// send queues the tag on the delivery's connection, unless its consumer
// or subscription is gone.
func (d *Delivery) send(kind settleKind, delayMillis uint32) error {
	if d.consumer.isClosed() {
		return fmt.Errorf("client: tag %d (consumer closed): %w", d.Tag, ErrStaleDelivery)
	}
	if d.consumer.endedSince(d.gen) {
		return fmt.Errorf("client: tag %d (the broker ended that subscription): %w", d.Tag, ErrStaleDelivery)
	}
	if err := d.conn.settle(d.consumer.id, kind, delayMillis, d.Tag); err != nil {
		return fmt.Errorf("client: tag %d (connection ended): %w", d.Tag, err)
	}
	return nil
}
