package client

import (
	"context"
	"fmt"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// Queue management (protocol version 5): a queue's state, purge and
// delete, over the connection the client already has. Against a broker
// older than version 5 each call fails with ErrInvalid before anything
// is sent.

// PartitionFrontiers are one partition log's written and durable
// frontiers on the node serving the queue: records below WrittenNext were
// handed to the operating system (they survive a crash of the broker
// process), records below DurableNext were synced (they survive a power
// loss too).
type PartitionFrontiers = wire.PartitionFrontiers

// QueueInfo is a queue's state when the broker serving it read it.
type QueueInfo struct {
	Queue      string
	Durability Durability // the mode in effect: Durable or Buffered
	Ready      uint64     // messages waiting for a consumer
	InFlight   uint64     // messages delivered and not settled yet (leased to a consumer)
	Bytes      uint64     // what the unsettled messages store, counted as the queue's MaxBytes counts it
	Consumers  int
	// Unavailable says why the queue is not serving (its log latched
	// after a storage failure); "" while it serves.
	Unavailable string
	// Partitions holds each partition's frontiers, in partition order;
	// its length is the queue's partition count.
	Partitions []PartitionFrontiers
}

// Messages is the number of unsettled messages: ready plus in flight.
func (q QueueInfo) Messages() uint64 { return q.Ready + q.InFlight }

// needsVersion5 refuses a queue management request on a connection to a
// broker that does not speak protocol version 5, which would otherwise
// close the connection on the unknown frame.
func needsVersion5(what string) func(*conn) error {
	return func(cn *conn) error {
		if cn.version < 5 {
			return fmt.Errorf("%w: the broker speaks protocol version %d, which cannot %s (version 5 can)",
				ErrInvalid, cn.version, what)
		}
		return nil
	}
}

// QueueInfo returns the queue's state. Errors: ErrNotFound;
// ErrServedElsewhere from a cluster node that does not serve the queue
// (the error's text names the node that does); ErrInvalid from a broker
// older than protocol version 5. While the client is reconnecting it
// waits for the connection until ctx is done.
func (c *Client) QueueInfo(ctx context.Context, queue string) (QueueInfo, error) {
	req := &wire.QueueInfo{Queue: queue}
	f, err := c.roundTripChecked(ctx, req, &req.Corr, needsVersion5("report a queue's state"))
	if err != nil {
		return QueueInfo{}, fmt.Errorf("client: queue info %s: %w", queue, err)
	}
	r, ok := f.(*wire.QueueInfoReply)
	if !ok {
		return QueueInfo{}, fmt.Errorf("client: queue info %s: unexpected answer %s", queue, f.Type())
	}
	return QueueInfo{
		Queue: r.Queue, Durability: r.Durability, Ready: r.Ready, InFlight: r.InFlight, Bytes: r.Bytes,
		Consumers: int(r.Consumers), Unavailable: r.Unavailable, Partitions: r.Partitions,
	}, nil
}

// PurgeQueue discards the queue's ready messages and returns how many it
// discarded. Messages delivered and not settled yet stay with their
// consumers (and come back if released); messages published meanwhile
// stay in the queue; nothing goes to the dead-letter queue. Errors as
// QueueInfo's.
func (c *Client) PurgeQueue(ctx context.Context, queue string) (purged uint64, err error) {
	req := &wire.PurgeQueue{Queue: queue}
	f, err := c.roundTripChecked(ctx, req, &req.Corr, needsVersion5("purge a queue"))
	if err != nil {
		return 0, fmt.Errorf("client: purge %s: %w", queue, err)
	}
	r, ok := f.(*wire.Purged)
	if !ok {
		return 0, fmt.Errorf("client: purge %s: unexpected answer %s", queue, f.Type())
	}
	return r.Purged, nil
}

// DeleteOption changes what DeleteQueue does.
type DeleteOption func(*wire.DeleteQueue)

// IfEmpty makes DeleteQueue refuse, with ErrConflict, a queue that holds
// messages, ready or in flight. The broker checks just before it deletes,
// not atomically with the deletion: a publish confirmed in between goes
// with the queue, so stop the publishers first.
func IfEmpty() DeleteOption { return func(d *wire.DeleteQueue) { d.IfEmpty = true } }

// DeleteQueue deletes the queue and its messages; on a cluster node, on
// every node of the cluster. Consumers of the queue end (they try to
// subscribe again and get ErrNotFound), and later publishes to it fail
// with ErrNotFound. Errors: ErrNotFound; ErrConflict with IfEmpty and a
// queue holding messages; ErrServedElsewhere for IfEmpty on a cluster
// node that does not serve the queue (it cannot count its messages);
// ErrInvalid from a broker older than protocol version 5.
func (c *Client) DeleteQueue(ctx context.Context, queue string, opts ...DeleteOption) error {
	req := &wire.DeleteQueue{Queue: queue}
	for _, o := range opts {
		o(req)
	}
	f, err := c.roundTripChecked(ctx, req, &req.Corr, needsVersion5("delete a queue"))
	if err != nil {
		return fmt.Errorf("client: delete %s: %w", queue, err)
	}
	if _, ok := f.(*wire.Deleted); !ok {
		return fmt.Errorf("client: delete %s: unexpected answer %s", queue, f.Type())
	}
	return nil
}
