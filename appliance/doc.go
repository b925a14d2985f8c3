// Package appliance is the solo Fibril broker: declared queues, each a set
// of partitions, each partition one log (package wal) holding publishes and
// settle events together; leases, settles, dead letters, dedupe, limits and
// checkpoints; declarations, runtime settings and snapshots in Pebble. It
// runs without the cluster: package federation plugs in through the
// Replication and ReplicaGate hooks, and nothing here imports it.
//
// Its subpackages: wire (the client protocol's frames), server (the
// protocol server), client (the Go client), admin (the HTTP API and
// metrics, with the view types it renders) and dashboard.
//
// # State
//
// A partition's state is applied only after its append completes at the
// queue's boundary (written for buffered, durable for durable) and, in a
// cluster, only once the replica gate passes it. At open, the state is
// rebuilt from the last snapshot and a replay of the log after it
// (recover.go).
//
// # Metadata store (Pebble, every write synced)
//
//	q/<queue>              QueueConfig as JSON (field names pinned by tags)
//	s/settings             Settings as JSON (keys are the setting names)
//	c/<queue>/<partition>  partition snapshot, binary (snapshot.go)
//
// A snapshot is recovery authority for its partition once stored: it is
// written only after the log is synced past its boundary (checkpoint.go).
//
//	snapshot: u32 crc32c of the rest | u64 boundary | u32 n | n × message | u32 m | m × dedupe
//	message:  u64 offset | u32 deliveries | u64 size | i64 unix nanos | u16 len id | id
//	dedupe:   u64 offset | i64 unix nanos | u16 len id | id
//
// A message's size is what it stores (body, header keys and values, id, key),
// the figure a queue's MaxBytes counts. The dedupe list is the
// partition's remembered ids, oldest first, within the queue's dedupe
// bounds (dedupe.go).
//
// # Log records (the payload of a wal record; little endian)
//
//	type 1 publish       i64 unix nanos | u16 len id | id | u16 n headers | n × (u16 k | k | u16 v | v) | body
//	type 2 ack           u64 offset settled
//	type 3 release       u64 offset (ready again, one more delivery counted)
//	type 4 discard       u64 offset
//	type 5 dead-letter   u64 offset (its copy went to the dead-letter queue)
//	type 6 expire        u64 offset (lease expired: ready again, one more delivery)
//	type 7 marker        nothing (a new owner's first record of its epoch)
//	type 8 keyed publish i64 unix nanos | u16 len id | id | u16 len key | key | u16 n headers | ... | body
//	                     (a message published with a key; without one it is a type 1)
//
// testdata/golden holds each of these formats as this version writes them;
// a test keeps later versions decoding them.
//
// # Errors
//
// Catalog (errors.go) is the one ordered mapping of the sentinel errors to
// the wire protocol's codes and the admin API's HTTP statuses.
//
// # Partitions
//
// A partition runs two goroutines. The applier receives completed appends
// in offset order and applies them to the partition's state; the
// dispatcher wakes on a kick or on its timer, expires leases, hands ready
// messages to subscriptions with credit and, while a lease is held,
// re-arms its timer for the earliest lease deadline.
// Publishers, settling consumers and checkpoints run on their callers'
// goroutines.
//
// The decisions are pure. partitionState (state.go) applies log records;
// dispatchCore (lease.go) decides which ready message goes to which
// subscription (round robin, lowest offset first), when leases expire,
// what a settle ends, how an extension moves a deadline and a delayed nack
// detaches a lease (its expiry is then a requeue, appended as a release
// record: nothing of the delay is logged), and what removing a
// subscription returns to ready.
// Both take the event (and the core the instant) as arguments and return
// effects; neither starts goroutines, takes locks, reads the clock or does
// I/O. The one thing the core asks outside itself is a subscription's
// credit, through the consumer interface. The partition (partition.go)
// holds both under its mutex and carries the effects out: appends to the
// log, deliveries, credit given back.
//
// Every piece of a partition's mutable state has one owner, named in the
// partition struct: mu guards the applied state, the leases and what
// snapshots need; submitMu guards the hand-off to the applier; the publish
// batch has its own mutex (batch.go); ckptMu is held across one
// checkpoint. The message count and bytes are lock-free mirrors, written
// only under mu. A Subscription's mutex guards its own credit and held
// tags. The queue's dedupe table has its own mutex, taken under
// partition.mu (an applied publish marks its id stored) and never the
// other way. Lock order: partition.ckptMu, then partition.mu, then
// Subscription.mu or the dedupe table's mutex.
package appliance
