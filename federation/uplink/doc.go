// Package uplink forwards local queues to a queue on a remote Fibril
// broker, solo or cluster, across a link that may drop: store and
// forward, as NATS leaf nodes and RabbitMQ's shovel do.
//
// An Uplink consumes each of its local queues through the client API (in
// fibrild, over the daemon's own client listener; as a library, next to
// any broker) and publishes every delivery to the remote queue, pipelined
// up to Options.Window publishes in flight. A local message is acked only
// after the remote confirmed it at the remote queue's boundary; until then
// it stays in the local queue, bounded by that queue's own limits and the
// disk budget, so memory stays flat however long the link is down.
//
// Every forwarded message carries a stable id, made of the source node,
// the local queue, its partition log's incarnation, the partition and the
// offset, and the uplink declares the remote queue with a dedupe window.
// So a resend after a reconnect, a crash of this process or a power cut
// of the edge is dropped by the remote queue as a duplicate: at least
// once on the wire, exactly once in the remote queue within its dedupe
// window. Messages of one local partition go out in offset order and,
// without a key of their own, to one remote partition (they are keyed by
// their local partition), so the remote queue keeps each local
// partition's order; a keyed message keeps its key, and with it the
// order among messages with that key.
//
// After a failure the uplink backs off and resends from the first
// unconfirmed message; publishes confirmed out of turn are dropped by the
// remote's dedupe window.
package uplink
