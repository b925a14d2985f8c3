package appliance

import "github.com/fibril-edge/fibril/wal"

// Replication lets a cluster node take part in its partitions' appends: a
// partition's records are applied (confirmed, made deliverable) only once
// its gate says enough copies hold them. A solo broker has none.
type Replication interface {
	// Attach is called when a partition's log is open and recovered, before
	// it takes appends. It returns the partition's gate, or nil when the
	// partition needs none.
	Attach(queue string, partition int, cfg QueueConfig, log *wal.Log) ReplicaGate
}

// Forwarder is implemented by a Replication that can publish to a queue
// another node serves (a cluster's forwarding): a dead-letter copy goes
// there when the dead-letter queue is not served here, as after a failover
// that moved the queue and its dead-letter queue to different nodes.
// Forward reports false when no other node serves the queue.
type Forwarder interface {
	Forward(queue string, m Message, done func(Confirm, error)) bool
}

// SettingsObserver is implemented by a Replication that applies the
// runtime settings to logs of its own (a cluster node's copies of other
// nodes' partitions follow storage.background_sync_interval_ms too). The
// broker calls it after every change it applied.
type SettingsObserver interface {
	SettingsChanged(Settings)
}

// ReplicaGate holds one partition's applies until enough copies exist.
type ReplicaGate interface {
	// Wait returns once enough copies hold every record before next, or
	// with an error once stop closes.
	Wait(stop <-chan struct{}, next uint64) error
	// Floor is the lowest offset a follower may still need: retention
	// never removes it.
	Floor() uint64
	// Detach stops replicating the partition (its queue closed).
	Detach()
	// Status says what a confirm waiting now needs, for errors: "durable
	// on 1 of 3 copies, the policy needs 2".
	Status() string
	// Writable is nil while the partition may append: a cluster's owner
	// writes only in an epoch the control plane installed it in. Its
	// error (ErrUnavailable) fails the publish or settle before anything
	// is written.
	Writable() error
	// AwaitWritable returns once Writable would pass, once stop closes,
	// or once waiting longer is pointless (Writable then says why): a
	// publish that reaches a cluster's owner while the cluster installs
	// it (every restart of an owner goes through a recovery) is held
	// until it may be written instead of refused.
	AwaitWritable(stop <-chan struct{})
}
