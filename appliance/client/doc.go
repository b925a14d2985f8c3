// Package client is the Go client of the Fibril broker. It speaks the
// binary protocol of docs/protocol.md (frames from package wire) over TCP,
// or TLS when Options.TLS is set, and imports nothing else but the
// standard library.
//
//	c, err := client.Dial(ctx, "127.0.0.1:7420", client.Options{Token: token})
//	res, err := c.DeclareQueue(ctx, client.Queue("clicks").Buffered())
//	cf, err := c.Publish(ctx, "clicks", client.Message{ID: id, Body: body})
//	cons, err := c.Subscribe(ctx, "clicks", client.SubscribeOptions{
//		Handler: func(ctx context.Context, d *client.Delivery) error { return process(d.Body) },
//	})
//
// # Addresses
//
// Dial takes one broker address, host:port, or a comma-separated list of
// them, the nodes of a cluster: "10.0.0.1:7420,10.0.0.2:7420,10.0.0.3:7420".
// Any node serves every queue (a node that does not own a queue forwards
// to its owner), so the client needs only one of them. Dial tries the
// addresses in order, each within Options.DialTimeout, and connects to the
// first that answers; if none does, its error names every address with
// why it failed. After a lost connection the client tries the next
// address first and goes round the list (see Connection loss); Addr says
// which address it is connected to now.
//
// # Queues
//
// Queue("name") starts a declaration; chain Buffered or Durable,
// Partitions, DeadLetter, MaxDeliveries, AckDeadline, MaxBytes,
// MaxMessages, DropOldest and DedupeWindow onto it and pass it to
// DeclareQueue. A queue's mode is fixed by its first declare: a declare
// naming the other mode fails with ErrConflict, one naming no mode keeps
// the current one. DeclareResult says which mode is in effect and, for a
// buffered queue, carries the broker's loss-window warning. QueueInfo
// reports a queue's counts and each partition's written and durable
// frontiers, PurgeQueue discards its ready messages, and DeleteQueue
// (with IfEmpty, only an empty one) deletes it; they need a broker
// speaking protocol version 5.
//
// # Publishing
//
// Publish waits for the Confirm; PublishAsync returns a Future at once.
// Either way many publishes are in flight on the one connection at a time
// (pipelined by the protocol's Corr), up to Options.MaxInFlight. A Confirm
// means the message is stored at the queue's durability: written to the
// operating system for a buffered queue, synced to disk for a durable one.
//
// When the connection is lost, publishes in flight fail with
// ErrConnectionLost: they may or may not be stored. To retry safely, give
// each message an ID (Message.ID) and declare the queue with a
// DedupeWindow; a retry of a message that was stored is then confirmed
// with Confirm.Duplicate set and not stored twice. IsRetryable tells which
// errors are worth retrying.
//
// # Consuming
//
// Subscribe calls a handler per delivery: a nil error acks it, an error
// nacks it with requeue (an error matching ErrDiscard nacks it without),
// unless the handler settles it itself or SubscribeOptions.ManualAck is
// set. Consume hands deliveries out on a channel instead; settle each with
// Delivery.Ack or Delivery.Nack. Prefetch bounds the deliveries a consumer
// holds unsettled. Settles are fire and forget and batched: each Ack or
// Nack queues its tag, and the connection's writer sends queued tags at
// once when idle, or together (one frame per consumer and kind) when busy.
//
// A handler that needs longer than the queue's AckDeadline calls
// Delivery.InProgress now and then: each call starts the deadline over,
// so the broker does not deliver the message again meanwhile. A handler
// that wants a message back later, not at once, settles it with
// Delivery.NackDelay(d): the consumer stops holding it (its prefetch slot
// is free at once) and the broker delivers it again after d, not before.
// The delay is kept in the broker's memory: a broker restart delivers the
// message at once. Both need a broker speaking protocol version 5.
//
// # Connection loss
//
// Each connection has a reader and a writer goroutine. The writer sends a
// Heartbeat when the client has sent nothing for the heartbeat interval;
// the reader gives up on a connection that has been silent for three
// intervals. On any loss the client reconnects with exponential backoff
// and jitter (Options.InitialBackoff to Options.MaxBackoff) and subscribes
// every Consumer again. With several addresses it reconnects in rounds:
// after each backoff wait it tries every address once, starting with the
// one after the address it lost, so a dead node costs one dial (at most
// Options.DialTimeout), not a wait; a queue whose owner failed over to
// another node goes on through whichever node the client reaches. The log
// lines about the connection (lost, reconnect failed, reconnected) carry
// the address as addr. Deliveries received before the loss are stale:
// the broker releases them for redelivery, and their Ack or Nack returns
// ErrStaleDelivery without sending anything. The broker may also end one
// subscription by itself while the connection stays (its queue moved to
// another node of a cluster, or was deleted): the Consumer then subscribes
// again on the same connection after a backoff, its earlier deliveries
// stale in the same way, and ends with ErrNotFound (see Err) if the queue
// is gone. While reconnecting, Publish,
// DeclareQueue and Subscribe wait for the connection (bounded by their
// ctx); PublishAsync fails at once with ErrNotConnected. A pipeline that
// resends from its first unconfirmed message after a loss chains its
// publishes with PublishAsyncAfter: each goes out on the connection of
// the one before it or not at all, so nothing sent on the new connection
// overtakes the resend. With
// Options.DisableReconnect the first loss is final.
//
// # Errors
//
// The broker's refusals are *Error values carrying a wire.ErrorCode;
// compare them with errors.Is against ErrNotFound, ErrConflict,
// ErrQueueFull, ErrDiskFull, ErrUnauthorized, ErrUnavailable,
// ErrServedElsewhere and the other code sentinels. The client's own errors are ErrClosed,
// ErrConnectionLost, ErrNotConnected, ErrStaleDelivery, ErrAlreadySettled
// and ErrInvalid. Every call that waits for the broker takes a context
// and returns its error when it ends first; PublishAsync returns at once
// (waiting only for an in-flight slot) and its Future always completes.
//
// # Closing
//
// Consumer.Close waits for running handlers, sends their settles and
// unsubscribes; the broker releases what is still unsettled. Client.Close
// stops every Consumer the same way (its Goodbye, sent after their
// settles, ends their subscriptions), lets the broker answer the requests
// it has read, and returns once every goroutine the client started has
// stopped.
package client
