package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// Durability is a queue's mode. It is fixed by the queue's first declare.
type Durability = wire.Durability

const (
	// Durable queues confirm and deliver a message after it is synced to
	// disk.
	Durable = wire.DurabilityDurable
	// Buffered queues confirm and deliver a message once it is handed to
	// the operating system, and sync it in the background soon after: a
	// power loss can lose confirmed messages.
	Buffered = wire.DurabilityBuffered
)

// QueueConfig is a queue declaration, built with Queue and its chainable
// methods:
//
//	client.Queue("clicks").Buffered().Partitions(4).DedupeWindow(time.Minute)
//
// Every setting left out is "unspecified": the broker's default for a new
// queue, the stored value for an existing one. So a declare without a mode
// keeps the queue's mode (and makes a new queue durable), while one naming
// the other mode fails with ErrConflict. Values are checked by DeclareQueue.
type QueueConfig struct {
	d       wire.Declare
	invalid []string // settings that cannot be sent, reported by validate
}

// Queue starts a declaration of the named queue.
func Queue(name string) QueueConfig { return QueueConfig{d: wire.Declare{Queue: name}} }

// Name is the queue's name.
func (q QueueConfig) Name() string { return q.d.Queue }

// Buffered asks for a buffered queue: confirms and deliveries once a
// message is written to the operating system, before it is synced.
func (q QueueConfig) Buffered() QueueConfig { q.d.Durability = Buffered; return q }

// Durable asks for a durable queue: confirms and deliveries only after a
// message is synced. A new queue with no mode is durable.
func (q QueueConfig) Durable() QueueConfig { q.d.Durability = Durable; return q }

// Partitions sets the partition count (1 to 65535; the broker may allow
// fewer). Fixed when the queue is created; another count is ErrConflict.
func (q QueueConfig) Partitions(n int) QueueConfig {
	if n < 1 || n > math.MaxUint16 {
		return q.bad(fmt.Sprintf("partitions %d (want 1 to %d)", n, math.MaxUint16))
	}
	q.d.Partitions = uint16(n)
	return q
}

// DeadLetter names the queue that receives discarded messages and messages
// past MaxDeliveries.
func (q QueueConfig) DeadLetter(queue string) QueueConfig {
	if queue == "" {
		return q.bad("empty dead-letter queue name")
	}
	q.d.DeadLetter = queue
	return q
}

// MaxDeliveries sets how many deliveries a message gets before it goes to
// the dead-letter queue (or is dropped without one).
func (q QueueConfig) MaxDeliveries(n int) QueueConfig {
	if n < 1 || int64(n) > math.MaxUint32 {
		return q.bad(fmt.Sprintf("max deliveries %d (want 1 to %d)", n, uint64(math.MaxUint32)))
	}
	q.d.MaxDeliveries = uint32(n)
	return q
}

// AckDeadline sets the lease of a delivery: unsettled past it, the message
// is redelivered. Whole milliseconds; the broker's default is 30 s.
func (q QueueConfig) AckDeadline(d time.Duration) QueueConfig {
	ms, ok := millis(d)
	if !ok {
		return q.bad(fmt.Sprintf("ack deadline %v (want 1ms to %v)", d, time.Duration(math.MaxUint32)*time.Millisecond))
	}
	q.d.AckDeadlineMillis = ms
	return q
}

// MaxBytes limits the queue's size in bytes: what its unsettled messages
// store, each counting its body, header keys and values, and id.
func (q QueueConfig) MaxBytes(n int64) QueueConfig {
	if n < 1 {
		return q.bad(fmt.Sprintf("max bytes %d (want at least 1)", n))
	}
	q.d.MaxBytes = uint64(n)
	return q
}

// MaxMessages limits the queue's size in messages.
func (q QueueConfig) MaxMessages(n int64) QueueConfig {
	if n < 1 {
		return q.bad(fmt.Sprintf("max messages %d (want at least 1)", n))
	}
	q.d.MaxMessages = uint64(n)
	return q
}

// DropOldest makes a full queue discard its oldest messages to take a new
// publish, instead of refusing it with ErrQueueFull.
func (q QueueConfig) DropOldest() QueueConfig { q.d.Overflow = wire.OverflowDropOldest; return q }

// RejectWhenFull makes a full queue refuse new publishes with ErrQueueFull
// (the default for a new queue; use it to undo an earlier DropOldest).
func (q QueueConfig) RejectWhenFull() QueueConfig { q.d.Overflow = wire.OverflowReject; return q }

// DedupeWindow sets how long the queue remembers message ids: a publish
// whose Message.ID was stored within the window is confirmed as a
// Duplicate and not stored again. Whole milliseconds.
func (q QueueConfig) DedupeWindow(d time.Duration) QueueConfig {
	ms, ok := millis(d)
	if !ok {
		return q.bad(fmt.Sprintf("dedupe window %v (want 1ms to %v)", d, time.Duration(math.MaxUint32)*time.Millisecond))
	}
	q.d.DedupeWindowMillis = ms
	return q
}

// DedupeMaxEntries bounds the ids the queue's dedupe table holds, all
// partitions together;
// past it the oldest are forgotten early. Needs a broker speaking
// protocol version 3.
func (q QueueConfig) DedupeMaxEntries(n int64) QueueConfig {
	if n < 1 {
		return q.bad(fmt.Sprintf("dedupe max entries %d (want at least 1)", n))
	}
	q.d.DedupeMaxEntries = uint64(n)
	return q
}

// DedupeMaxBytes bounds the bytes the queue's dedupe table holds
// (its ids plus a fixed cost each; 1 MiB to 1 GiB); past it the oldest
// are forgotten early. Needs a broker speaking protocol version 3.
func (q QueueConfig) DedupeMaxBytes(n int64) QueueConfig {
	if n < 1 {
		return q.bad(fmt.Sprintf("dedupe max bytes %d (want at least 1)", n))
	}
	q.d.DedupeMaxBytes = uint64(n)
	return q
}

// String prints the declaration's specified settings.
func (q QueueConfig) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Queue(%q)", q.d.Queue)
	if q.d.Durability != wire.DurabilityUnspecified {
		fmt.Fprintf(&b, ".%s", q.d.Durability)
	}
	for _, s := range []struct {
		name string
		v    uint64
	}{
		{"partitions", uint64(q.d.Partitions)}, {"max-deliveries", uint64(q.d.MaxDeliveries)},
		{"ack-deadline-ms", uint64(q.d.AckDeadlineMillis)}, {"max-bytes", q.d.MaxBytes},
		{"max-messages", q.d.MaxMessages}, {"dedupe-window-ms", uint64(q.d.DedupeWindowMillis)},
		{"dedupe-max-entries", q.d.DedupeMaxEntries}, {"dedupe-max-bytes", q.d.DedupeMaxBytes},
	} {
		if s.v != 0 {
			fmt.Fprintf(&b, " %s=%d", s.name, s.v)
		}
	}
	if q.d.DeadLetter != "" {
		fmt.Fprintf(&b, " dead-letter=%q", q.d.DeadLetter)
	}
	if q.d.Overflow != wire.OverflowDefault {
		fmt.Fprintf(&b, " overflow=%s", q.d.Overflow)
	}
	return b.String()
}

func (q QueueConfig) bad(reason string) QueueConfig {
	q.invalid = append(q.invalid[:len(q.invalid):len(q.invalid)], reason)
	return q
}

// validate reports what the builder refused and what the frame cannot
// carry. The broker checks the rest (name rules, its own limits).
func (q QueueConfig) validate() error {
	var errs []error
	if q.d.Queue == "" {
		errs = append(errs, errors.New("empty queue name"))
	}
	for _, r := range q.invalid {
		errs = append(errs, errors.New(r))
	}
	if err := q.d.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w queue %q: %w", ErrInvalid, q.d.Queue, err)
	}
	return nil
}

// millis converts a positive duration to whole milliseconds for the wire,
// rounding up so that a positive duration never becomes 0 ("unspecified").
func millis(d time.Duration) (uint32, bool) {
	if d <= 0 {
		return 0, false
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms > math.MaxUint32 {
		return 0, false
	}
	return uint32(ms), true
}

// DeclareResult is the declaration in effect after DeclareQueue.
type DeclareResult struct {
	Queue      string
	Durability Durability // the mode in effect: Durable or Buffered
	Partitions int
	Created    bool   // this declare created the queue
	Warning    string // for a buffered queue, the broker's loss-window warning
}

// DeclareQueue creates the queue, or checks and updates an existing one.
// It fails with ErrConflict if the queue exists with the other mode or
// another partition count, and ErrBadRequest for a name or value the
// broker refuses. While the client is reconnecting it waits for the
// connection until ctx is done.
func (c *Client) DeclareQueue(ctx context.Context, q QueueConfig) (DeclareResult, error) {
	if err := q.validate(); err != nil {
		return DeclareResult{}, err
	}
	d := q.d // a copy: the request owns its frame
	f, err := c.roundTripChecked(ctx, &d, &d.Corr, func(cn *conn) error {
		if (d.DedupeMaxEntries != 0 || d.DedupeMaxBytes != 0) && cn.version < 3 {
			return fmt.Errorf("%w: the broker speaks protocol version %d, which cannot carry dedupe bounds (version 3 can)",
				ErrInvalid, cn.version)
		}
		return nil
	})
	if err != nil {
		return DeclareResult{}, fmt.Errorf("client: declare %s: %w", q.d.Queue, err)
	}
	r, ok := f.(*wire.Declared)
	if !ok {
		return DeclareResult{}, fmt.Errorf("client: declare %s: unexpected answer %s", q.d.Queue, f.Type())
	}
	return DeclareResult{
		Queue:      r.Queue,
		Durability: r.Durability,
		Partitions: int(r.Partitions),
		Created:    r.Created,
		Warning:    r.Warning,
	}, nil
}

// SetMode changes a live queue's durability mode, fenced: a change to
// Buffered is recorded before any publish is confirmed under the weaker
// rule; a change to Durable syncs every partition's log past what it had
// written before publishes resume under the stronger one. It returns the
// declaration in effect once the change took effect. Each Confirm names
// the mode it was given under, so confirms returned before keep their
// meaning. Errors: ErrConflict while another change of the queue is
// pending, ErrNotFound, ErrInvalid on a cluster node (not built there yet)
// or a broker older than protocol version 4, ErrUnavailable when the sync
// failed (the queue kept its mode).
func (c *Client) SetMode(ctx context.Context, queue string, d Durability) (DeclareResult, error) {
	if d != Durable && d != Buffered {
		return DeclareResult{}, fmt.Errorf("client: set the mode of %s: %w: mode %v, want Durable or Buffered", queue, ErrInvalid, d)
	}
	m := &wire.SetMode{Queue: queue, Durability: d}
	f, err := c.roundTripChecked(ctx, m, &m.Corr, func(cn *conn) error {
		if cn.version < 4 {
			return fmt.Errorf("%w: the broker speaks protocol version %d, which cannot change a queue's mode (version 4 can)",
				ErrInvalid, cn.version)
		}
		return nil
	})
	if err != nil {
		return DeclareResult{}, fmt.Errorf("client: set the mode of %s: %w", queue, err)
	}
	r, ok := f.(*wire.Declared)
	if !ok {
		return DeclareResult{}, fmt.Errorf("client: set the mode of %s: unexpected answer %s", queue, f.Type())
	}
	return DeclareResult{Queue: r.Queue, Durability: r.Durability, Partitions: int(r.Partitions), Warning: r.Warning}, nil
}
