package client

import (
	"errors"
	"fmt"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// Error is an error the broker sent: an Error frame answering a request, an
// Error with Corr 0 that closed the connection, or a SettleError for one
// delivery tag. Compare it with the sentinels below (errors.Is matches on
// Code alone) or read Code directly.
type Error struct {
	Code    wire.ErrorCode
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "fibril " + e.Code.String()
	}
	return "fibril " + e.Code.String() + ": " + e.Message
}

// Is reports whether target is an *Error with the same Code, so that
// errors.Is(err, client.ErrQueueFull) holds for every queue_full error
// whatever its message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Retryable reports whether the same request may succeed later unchanged
// (queue_full, disk_full, unavailable). Retry a publish with the same
// Message.ID so the queue's dedupe window removes repeats.
func (e *Error) Retryable() bool { return e.Code.Retryable() }

// Sentinels for the broker's error codes. They match any *Error with the
// same code: errors.Is(err, client.ErrConflict).
var (
	ErrBadRequest         = &Error{Code: wire.CodeBadRequest}
	ErrUnauthorized       = &Error{Code: wire.CodeUnauthorized}
	ErrNotFound           = &Error{Code: wire.CodeNotFound}
	ErrConflict           = &Error{Code: wire.CodeConflict}
	ErrQueueFull          = &Error{Code: wire.CodeQueueFull}
	ErrDiskFull           = &Error{Code: wire.CodeDiskFull}
	ErrUnavailable        = &Error{Code: wire.CodeUnavailable}
	ErrStaleTag           = &Error{Code: wire.CodeStaleTag}
	ErrTooLarge           = &Error{Code: wire.CodeTooLarge}
	ErrInternal           = &Error{Code: wire.CodeInternal}
	ErrUnsupportedVersion = &Error{Code: wire.CodeUnsupportedVersion}
	// ErrServedElsewhere: a cluster node was asked for the state or purge
	// of a queue another node serves; the error's text names that node
	// and its client address. Ask that node. Protocol version 5.
	ErrServedElsewhere = &Error{Code: wire.CodeServedElsewhere}
)

// Errors the client raises itself.
var (
	// ErrClosed: the Client (or the Consumer) was closed.
	ErrClosed = errors.New("client: closed")
	// ErrConnectionLost: the connection ended while a request was in
	// flight. A publish that fails with it may or may not be stored;
	// publish it again with the same Message.ID and the queue's dedupe
	// window turns a repeat into a Confirm with Duplicate set. Retryable.
	ErrConnectionLost = errors.New("client: connection lost")
	// ErrNotConnected: there is no connection right now (the client is
	// reconnecting) and the call does not wait for one. Nothing was sent.
	// Retryable.
	ErrNotConnected = errors.New("client: not connected")
	// ErrStaleDelivery: a settle of a delivery whose connection has ended
	// or whose Consumer was closed. The settle is a local no-op; the broker
	// has released (or will release) the message for redelivery.
	ErrStaleDelivery = errors.New("client: stale delivery")
	// ErrAlreadySettled: Ack or Nack on a delivery already settled.
	ErrAlreadySettled = errors.New("client: delivery already settled")
	// ErrInvalid: an option, queue setting or message the client refuses
	// before sending anything.
	ErrInvalid = errors.New("client: invalid")
	// ErrDiscard is for handlers: a handler error matching it (errors.Is)
	// nacks the delivery without requeue, so the broker discards it (to the
	// queue's dead-letter queue if one is declared). Any other non-nil
	// error nacks with requeue.
	ErrDiscard = errors.New("client: discard message")
)

// IsRetryable reports whether err is worth retrying later unchanged: a lost
// or missing connection, or a broker error with a retryable code
// (queue_full, disk_full, unavailable). A publish retried after
// ErrConnectionLost should carry the same Message.ID.
func IsRetryable(err error) bool {
	if errors.Is(err, ErrConnectionLost) || errors.Is(err, ErrNotConnected) {
		return !errors.Is(err, ErrClosed)
	}
	var e *Error
	return errors.As(err, &e) && e.Retryable()
}

// remoteError turns a received Error frame into an *Error.
func remoteError(f *wire.Error) *Error { return &Error{Code: f.Code, Message: f.Message} }

// lostError is the error of a request whose connection ended before its
// answer: it matches ErrConnectionLost and the cause, or, when the client
// was closing, ErrClosed and ErrConnectionLost.
func lostError(cause error, closing bool) error {
	if closing {
		return fmt.Errorf("%w before the answer came (%w)", ErrClosed, ErrConnectionLost)
	}
	return fmt.Errorf("%w: %w", ErrConnectionLost, cause)
}
