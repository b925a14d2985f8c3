package server

import (
	"context"

	"github.com/fibril-edge/fibril/appliance"
)

// Cluster is how a cluster node's server reaches the rest of the cluster:
// declarations go through the control plane, publishes to queues another
// node serves are forwarded to it, and a subscription to such a queue is
// refused with the owner's address (consumers are redirected: they connect
// to the owner).
type Cluster interface {
	// Declare declares a queue cluster-wide and returns the declaration in
	// effect; when this node serves the queue, the local broker has it on
	// return.
	Declare(ctx context.Context, c appliance.QueueConfig) (appliance.DeclareResult, error)
	// Forward publishes m to the node serving queue and reports whether it
	// did; false when this node serves the queue or no node does.
	Forward(queue string, m appliance.Message, done func(appliance.Confirm, error)) bool
	// Owner names the node serving a queue this node does not serve: its id
	// and client address.
	Owner(queue string) (id, addr string, ok bool)
}
