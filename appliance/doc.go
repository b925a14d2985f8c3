// Package appliance is the Fibril broker: declared queues, each a set of
// partition logs, with declarations, settings and snapshots in Pebble.
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
// what a settle ends and what removing a subscription returns to ready.
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
// tags. Lock order: partition.ckptMu, then partition.mu, then
// Subscription.mu.
package appliance
