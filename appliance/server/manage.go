package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/wire"
)

// The queue management requests of protocol version 5. The broker answers
// them; on a cluster node a deletion goes through the cluster (so every
// copy follows), while a queue's state and a purge are the business of
// the node serving the queue, which this node names instead of relaying
// to it, as the admin API does.

// errNotEmpty refuses a DeleteQueue with IfEmpty set; a conflict on the
// wire, as HTTP's 409 would be.
var errNotEmpty = fmt.Errorf("%w: queue not empty", appliance.ErrConflict)

// queueInfo answers a QueueInfo with the broker's view of the queue.
func (c *conn) queueInfo(f *wire.QueueInfo) wire.Frame {
	in, err := c.s.b.QueueInfo(f.Queue)
	if err != nil {
		return c.errorFrame(f.Corr, c.servedElsewhere(f.Queue, "read its state", err))
	}
	return infoReply(f.Corr, in)
}

// infoReply is the wire form of in: every frontier keeps its boundary,
// written or durable, in a field of its own.
func infoReply(corr uint64, in appliance.QueueInfo) *wire.QueueInfoReply {
	r := &wire.QueueInfoReply{
		Corr:        corr,
		Queue:       in.Config.Name,
		Durability:  in.Config.Durability,
		Ready:       uint64(max(in.Ready, 0)),
		InFlight:    uint64(max(in.InFlight, 0)),
		Bytes:       uint64(max(in.Bytes, 0)),
		Consumers:   uint32(max(in.Consumers, 0)),
		Unavailable: clip(in.Unavailable, 1024),
		Partitions:  make([]wire.PartitionFrontiers, len(in.Partitions)),
	}
	for i, p := range in.Partitions {
		r.Partitions[i] = wire.PartitionFrontiers{WrittenNext: p.WrittenNext, DurableNext: p.DurableNext}
	}
	return r
}

// purgeQueue discards the queue's ready messages and answers how many.
func (c *conn) purgeQueue(f *wire.PurgeQueue) wire.Frame {
	n, err := c.s.b.Purge(context.Background(), f.Queue)
	if err != nil {
		return c.errorFrame(f.Corr, c.servedElsewhere(f.Queue, "purge it", err))
	}
	return &wire.Purged{Corr: f.Corr, Queue: f.Queue, Purged: uint64(max(n, 0))}
}

// deleteQueue deletes the queue: through the cluster on a cluster node,
// else from the broker.
//
// IfEmpty is checked on the broker serving the queue just before the
// deletion, not atomically with it: a publish confirmed in between is
// deleted with the queue. It keeps an operator from deleting a backlog by
// mistake; it does not fence publishers, which should be stopped first.
func (c *conn) deleteQueue(f *wire.DeleteQueue) wire.Frame {
	ctx := context.Background()
	del := c.s.b.DeleteQueue
	if cl := c.s.opts.Cluster; cl != nil {
		cq, ok := cl.(ClusterQueues)
		if !ok {
			return c.errorFrame(f.Corr, fmt.Errorf("%w: this cluster node cannot delete queues over the client protocol; "+
				"delete queue %s through the admin API", appliance.ErrInvalid, f.Queue))
		}
		del = cq.DeleteQueue
	}
	if f.IfEmpty {
		in, err := c.s.b.QueueInfo(f.Queue)
		if err != nil {
			return c.errorFrame(f.Corr, c.servedElsewhere(f.Queue, "delete it if empty", err))
		}
		if in.Messages > 0 {
			return c.errorFrame(f.Corr, fmt.Errorf("%w: queue %s holds %d messages (%d ready, %d in flight); not deleted",
				errNotEmpty, f.Queue, in.Messages, in.Ready, in.InFlight))
		}
	}
	if err := del(ctx, f.Queue); err != nil {
		return c.errorFrame(f.Corr, fmt.Errorf("delete queue %s: %w", f.Queue, err))
	}
	return &wire.Deleted{Corr: f.Corr, Queue: f.Queue}
}

// servedElsewhere turns the broker's not-found for a queue that another
// cluster node serves into an error naming that node, so that the client
// knows where to ask; any other error is returned as it is. what says
// what the client should do there.
func (c *conn) servedElsewhere(queue, what string, err error) error {
	if !errors.Is(err, appliance.ErrNotFound) {
		return err
	}
	cq, ok := c.s.opts.Cluster.(ClusterQueues) // false for a nil Cluster too
	if !ok {
		return err
	}
	if id, addr, ok := cq.Owner(queue); ok {
		return fmt.Errorf("%w: queue %s is served by node %s (client address %s): %s through that node",
			appliance.ErrServedElsewhere, queue, id, addr, what)
	}
	return err
}
