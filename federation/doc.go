// Package federation is Fibril's cluster: several brokers under one
// control plane, each queue owned by one node and copied to followers.
//
// # Pieces
//
//   - control (subpackage): the replicated state machine on
//     hashicorp/raft — members, queue declarations, assignments (owner,
//     followers, epoch, policy) and cluster settings. Pure: commands in,
//     state out, no I/O.
//   - raftstore (subpackage): raft's log and stable stores on Pebble.
//   - replication (subpackage): the data plane — one stream per
//     (partition, follower) from owner to follower, written and durable
//     progress reported apart, and the gate that turns progress into the
//     owner's confirm and delivery boundary.
//   - Node (node.go): one raft voter or non-voter with its transport on
//     the cluster port, proposals forwarded to the leader (propose.go),
//     joins, and the replay barrier a restarted node waits for.
//   - Cluster (cluster.go): ties a Node, the local appliance.Broker and
//     replication together. It is the broker's appliance.Replication: every
//     partition this node owns gets a gate (owned.go); every queue placed
//     on this node is declared in the local broker; publishes and consumers
//     for a queue owned elsewhere are forwarded to its owner's client
//     listener (forward.go, consume.go). View (view.go) fills the admin
//     API's ClusterView.
//
// The cluster port carries raft, control requests and replication
// streams, told apart by a connection's first byte (mux.go).
//
// # Goroutines
//
// raft's own; per Node, announce (publishes this member's addresses once
// a leader is known) and the mux's accept loop; per Cluster,
// followAssignments (starts streams as an owned partition's assignment
// gains followers), collectCopies (removes copies the state no longer
// assigns here) and, once Bind is called, syncQueues (declares and deletes
// queues in the local broker as the control state changes). Each stream's
// goroutines are replication's.
//
// # State and locks
//
// The control state is owned by raft's apply goroutine; readers take the
// FSM's read lock (control.FSM.Read) or a copy. In Cluster, serveMu makes
// declaring and deleting in the local broker one at a time and guards
// declared and servedAt; mu guards owned and broker; fwdMu guards the
// forwarding clients; each ownedPartition's mu guards its gate and streams.
// Lock order: serveMu, then mu; an ownedPartition's mu is never held while
// taking Cluster.mu (Detach closes first, then unregisters); fwdMu is taken
// alone.
//
// # What a confirm means
//
// A publish to a partition this node owns completes in the local log at
// the queue's boundary and is then held at the gate until enough
// followers report it at the policy's boundary (written for
// replica_buffered, durable otherwise); only then is it applied, confirmed
// and delivered.
package federation
