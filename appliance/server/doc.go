// Package server serves Fibril's client protocol (docs/protocol.md, frames
// in package wire) over TCP, or TLS when configured, on top of an
// *appliance.Broker.
//
// # One connection
//
// Each connection has two goroutines (the writer starts once the Hello is
// read) and an outbound queue between them:
//
//	socket ──> reader ──> broker (Declare, PublishAsync, Subscribe, settles)
//	                 │                 │ confirm and deliver callbacks
//	                 ▼                 ▼
//	              outbox (bounded) ──> writer ──> socket
//
// The reader handles frames in the order it reads them. Declare, Subscribe,
// Unsubscribe and the settles run on it; publishes are handed to
// Broker.PublishAsync, so many are in flight and their Confirm or Error
// frames go out as they complete. The writer takes everything queued,
// writes it, and flushes when the queue is empty; it sends a Heartbeat
// when it has sent nothing for the heartbeat interval.
//
// # Invariants
//
//   - The broker's callbacks never wait on a connection: they add a frame
//     to the outbox and return. The reader, not the broker, is held back
//     when the outbox is over its soft limit (it stops reading, so the
//     client's sends block instead). A client that stops reading is closed:
//     a write that makes no progress for WriteTimeout fails, the reader
//     gives up waiting for room after WriteTimeout, and an outbox past its
//     hard limit closes the connection at once.
//   - The Deliver frames queued and not yet written, on all connections
//     together, are bounded by DeliveryBudget (budget.go): past it the
//     connection with the most queued is paused (its subscriptions take no
//     new deliveries) until it writes half of that, and closed with
//     Goodbye{reason} if it has not within SlowConsumerGrace.
//   - A subscription never has more unsettled deliveries out than its
//     window (Prefetch plus Credit); the broker enforces it. Subscribed goes
//     out before the subscription's first Deliver, and no Deliver for a
//     SubID follows its Unsubscribed. When the broker ends a subscription
//     by itself (its queue deleted, or moved to another node of a
//     cluster), the client is sent Unsubscribed{Corr 0} and may subscribe
//     again under the same SubID.
//   - A protocol violation (malformed, oversized or unknown frame, a frame
//     from the wrong direction, a request with Corr 0, a second Hello)
//     closes that connection only, after Error{Corr 0}. A panic while
//     serving a connection is recovered, logged at error, and closes that
//     connection only.
//   - Slow peers cannot hold a connection open for free: the Hello must
//     arrive within HelloTimeout, a frame once started must arrive within
//     FrameTimeout, and a peer silent for three heartbeat intervals is
//     closed.
//   - Connections that have not authenticated are bounded: at most
//     MaxPreHello in all and MaxPreHelloPerSource per source (prehello.go),
//     each with one goroutine, a 4 KiB read buffer and a Hello frame whose
//     length is checked before anything is allocated for it. A newcomer
//     over a limit closes the oldest waiting connection of its source or
//     of the busiest one, never itself, and past half of MaxPreHello the
//     Hello timeout shortens to PressureHelloTimeout.
//   - When a connection ends, its subscriptions are closed, so what they
//     held unsettled is ready again for other consumers.
//
// # Shutdown
//
// Shutdown stops accepting, sends Goodbye{"shutting down"} on every
// connection, stops new deliveries, answers requests read afterwards with
// CodeUnavailable, waits for the client's Goodbye (at most a short grace
// period) and for the replies of requests already read, then closes each
// connection (write side first, then, once the client closes or after a
// short linger, the socket) and its subscriptions. The broker stays open: its owner closes
// it after Shutdown returns.
package server
