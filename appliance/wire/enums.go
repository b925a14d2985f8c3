package wire

import "fmt"

// Durability is a queue's mode on the wire.
type Durability uint8

const (
	// DurabilityUnspecified in a Declare keeps an existing queue's mode and
	// lets the server pick one for a new queue. Never valid in Declared.
	DurabilityUnspecified Durability = 0
	// DurabilityDurable: confirm and deliver after fsync on every required copy.
	DurabilityDurable Durability = 1
	// DurabilityBuffered: confirm and deliver once every required copy has
	// handed the record to the operating system; synced soon after.
	DurabilityBuffered Durability = 2
)

func (d Durability) String() string {
	switch d {
	case DurabilityUnspecified:
		return "unspecified"
	case DurabilityDurable:
		return "durable"
	case DurabilityBuffered:
		return "buffered"
	}
	return fmt.Sprintf("durability(%d)", uint8(d))
}

// Overflow says what a full queue does with a new publish.
type Overflow uint8

const (
	OverflowDefault    Overflow = 0 // keep the current policy; reject for a new queue
	OverflowReject     Overflow = 1 // refuse the publish with CodeQueueFull
	OverflowDropOldest Overflow = 2 // discard the oldest messages to make room
)

func (o Overflow) String() string {
	switch o {
	case OverflowDefault:
		return "default"
	case OverflowReject:
		return "reject"
	case OverflowDropOldest:
		return "drop-oldest"
	}
	return fmt.Sprintf("overflow(%d)", uint8(o))
}

// ErrorCode is the u16 code in Error and SettleError frames. Code 0 is not
// valid on the wire. A server sends only the codes of the protocol version
// it negotiated; a new code needs a new version.
type ErrorCode uint16

const (
	CodeBadRequest         ErrorCode = 1  // malformed or invalid request; a protocol violation also closes the connection
	CodeUnauthorized       ErrorCode = 2  // wrong or missing token; the connection is closed
	CodeNotFound           ErrorCode = 3  // no such queue (or subscription)
	CodeConflict           ErrorCode = 4  // declare conflicts with the stored declaration (mode, partitions)
	CodeQueueFull          ErrorCode = 5  // the queue is at its limit and its overflow policy is reject
	CodeDiskFull           ErrorCode = 6  // storage full: disk budget, free-space watermark, or no space left
	CodeUnavailable        ErrorCode = 7  // the queue's log is latched, or the broker is shutting down
	CodeStaleTag           ErrorCode = 8  // unknown or stale delivery tag
	CodeTooLarge           ErrorCode = 9  // frame or message above the limit
	CodeInternal           ErrorCode = 10 // a server bug or an unexpected failure
	CodeUnsupportedVersion ErrorCode = 11 // Hello named a version the server does not speak; the connection is closed
	CodeServedElsewhere    ErrorCode = 12 // version 5: a cluster node does not serve the queue; the message names the node that does

	maxErrorCode = CodeServedElsewhere
)

var codeNames = [...]string{
	CodeBadRequest:         "bad_request",
	CodeUnauthorized:       "unauthorized",
	CodeNotFound:           "not_found",
	CodeConflict:           "conflict",
	CodeQueueFull:          "queue_full",
	CodeDiskFull:           "disk_full",
	CodeUnavailable:        "unavailable",
	CodeStaleTag:           "stale_tag",
	CodeTooLarge:           "too_large",
	CodeInternal:           "internal",
	CodeUnsupportedVersion: "unsupported_version",
	CodeServedElsewhere:    "served_elsewhere",
}

func (c ErrorCode) String() string {
	if c.Valid() {
		return codeNames[c]
	}
	return fmt.Sprintf("code(%d)", uint16(c))
}

// Valid reports whether c is a code of the newest protocol version.
func (c ErrorCode) Valid() bool { return c >= CodeBadRequest && c <= maxErrorCode }

// validIn reports whether c is a code of protocol version v: a peer of
// an older version rejects a code it does not know as malformed.
func (c ErrorCode) validIn(v uint16) bool {
	if c == CodeServedElsewhere {
		return v >= 5
	}
	return c.Valid()
}

// Retryable reports whether the same request may succeed later without
// change: the queue was full, the disk was full, or the queue or broker was
// unavailable.
func (c ErrorCode) Retryable() bool {
	return c == CodeQueueFull || c == CodeDiskFull || c == CodeUnavailable
}
