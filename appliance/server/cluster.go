package server

import (
	"context"
	"time"

	"github.com/fibril-edge/fibril/appliance"
)

// Cluster is how a cluster node's server reaches the rest of the cluster:
// declarations go through the control plane, publishes to queues another
// node serves are forwarded to it, and a subscription to such a queue is
// served by consuming it on that node (the node proxies deliveries and
// settles), so a client may use any node for anything.
type Cluster interface {
	// Declare declares a queue cluster-wide and returns the declaration in
	// effect; when this node serves the queue, the local broker has it on
	// return.
	Declare(ctx context.Context, c appliance.QueueConfig) (appliance.DeclareResult, error)
	// ForwardFrom publishes m, from the connection from, to the node
	// serving queue and reports whether it did; false when this node
	// serves the queue or no node does. m.Body is valid only until it
	// returns: it copies what it keeps. A publish that fails with
	// appliance.ErrForwardBroken leaves every later one of from's to the
	// queue failed too, unsent, until from ends: the server ends it.
	ForwardFrom(from any, queue string, m appliance.Message, done func(appliance.Confirm, error)) bool
	// Local reports, without waiting, that this node serves queue and
	// Forward would return false at once; false says Forward may wait
	// (a queue unknown here, moving, or recovering) or forward.
	Local(queue string) bool
	// Consume subscribes to queue on the node serving it, calling
	// o.Deliver for each delivery, and reports whether it did (false: this
	// node serves the queue or no node does). partitions is the queue's
	// partition count.
	Consume(ctx context.Context, queue string, o appliance.SubscribeOptions) (sub Consumer, partitions int, ok bool, err error)
}

// Consumer is a subscription as the server drives it: the local broker's
// *appliance.Subscription, or a cluster node's proxy of a subscription on
// the queue's owner. Settles of tags it does not hold return an error
// matching appliance.ErrStaleTag (a *appliance.StaleTagsError lists them).
type Consumer interface {
	AddCredit(n int)
	Ack(tags ...uint64) error
	Nack(requeue bool, tags ...uint64) error
	Close()
}

var _ Consumer = (*appliance.Subscription)(nil)

// Extender and DelayedNacker are what a Consumer may also offer for the
// settle verbs of protocol version 5: Extend frames, and Nack frames with
// a DelayMillis. The server finds them with a type assertion rather than
// requiring them in Consumer, so that implementations and test fakes
// written before version 5 keep compiling. Without them those frames are
// answered with a SettleError (bad_request) for each tag, and nothing
// changes. Tags the consumer does not hold are reported as by Ack.
type Extender interface {
	// Extend resets the ack deadline of deliveries to now plus the
	// queue's ack deadline.
	Extend(tags ...uint64) error
}

// DelayedNacker: see Extender.
type DelayedNacker interface {
	// NackDelay requeues deliveries after delay, not before, and stops
	// holding them at once.
	NackDelay(delay time.Duration, tags ...uint64) error
}

var (
	_ Extender      = (*appliance.Subscription)(nil)
	_ DelayedNacker = (*appliance.Subscription)(nil)
)

// ModeChanger is implemented by a Cluster that changes queue modes
// cluster-wide: a SetMode request on a cluster node goes through it.
// ChangeMode returns the declaration in effect, and pending while the
// change waits to take effect (the owner carries it on).
type ModeChanger interface {
	ChangeMode(ctx context.Context, queue string, d appliance.Durability) (cfg appliance.QueueConfig, pending bool, err error)
}

// ClusterQueues is what a Cluster may also offer for the queue management
// requests of protocol version 5 (QueueInfo, PurgeQueue, DeleteQueue).
// The server finds it with a type assertion on Options.Cluster rather
// than requiring it in Cluster, so that implementations and test fakes
// written before version 5 keep compiling. Without it, a cluster node
// refuses DeleteQueue (deleting only its own broker's copy would leave
// the cluster's declaration and the other copies behind) and answers
// QueueInfo and PurgeQueue only for the queues its broker serves.
type ClusterQueues interface {
	// DeleteQueue deletes a queue cluster-wide, whichever node serves it.
	// An unknown queue is an error matching appliance.ErrNotFound.
	DeleteQueue(ctx context.Context, name string) error
	// Owner names the node serving a queue that this node does not serve:
	// its id and client address. ok is false when this node serves the
	// queue or no node does.
	Owner(queue string) (id, addr string, ok bool)
}
