// Package bridge connects Fibril to NATS. A Bridge holds one NATS
// connection (nats.go) and one Fibril client (package appliance/client; the
// broker in the same process is reached over loopback like any other) and
// runs any number of ingests and egresses on them.
//
// Ingest, core: a subscription (optionally in a queue group) on a subject
// pattern; each message goes to the queue its subject maps to (a fixed
// queue, or a template such as "temp-{1}" filled with the tokens the
// wildcards matched). The NATS headers travel as Fibril headers, the
// subject as header "nats-subject". Core NATS is at most once; the bridge
// drops a message it received only when the broker refuses it (queue
// full, unknown queue, too large), and then counts it by reason and logs
// it. A lost Fibril connection is retried, never a drop. When Run's
// context ends the subscription is drained: NATS sends nothing more and
// what it delivered is still published, for up to Options.DrainTimeout;
// only what is left then is dropped (counted as "shutdown").
//
// Ingest, JetStream: a durable pull consumer (explicit acks). Each message
// is published to Fibril with the message id "<stream>/<Nats-Msg-Id>"
// (Nats-Msg-Id is unique per stream only), or "<stream>:<stream sequence>"
// without one, and acked to
// JetStream only after Fibril confirmed it. A crash anywhere leaves the
// message unacked and JetStream redelivers it; the queue's dedupe window
// turns the repeat into a duplicate confirm. A queue that refuses a publish
// (full) blocks the ingest: it retries with backoff, keeps the message's
// ack deadline alive (InProgress) and pulls nothing more, so the stream
// holds the backlog; it resumes by itself once the queue takes messages.
//
// Egress: a Fibril consumer; each delivery is published to a NATS subject
// (acknowledged by a flush round trip) or to a JetStream stream (waiting for
// the stream's publish ack), and acked in Fibril only then. While NATS does
// not answer, the delivery is held and sent again, and the leases of all
// the egress holds are extended, so that an outage uses up none of the
// queue's MaxDeliveries; only a message NATS refuses (too large, rejected
// by the stream, no stream for the subject) is released for redelivery.
//
// A queue the broker says does not exist is never a silent loss: a
// JetStream ingest blocks and retries, a core ingest counts not_found
// drops, an egress retries its subscription, and Stats lists the queue in
// MissingQueues until it is used successfully.
//
// Invariant: nothing is acked on one side before the other side has
// accepted it.
package bridge
