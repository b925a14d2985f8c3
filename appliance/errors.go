package appliance

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/fibril-edge/fibril/appliance/wire"
	"github.com/fibril-edge/fibril/wal"
)

// Sentinel errors; callers tell them apart with errors.Is. Catalog says
// how every interface names each.
var (
	ErrInvalid      = errors.New("invalid request")          // 400
	ErrNotFound     = errors.New("queue not found")          // 404
	ErrModeConflict = errors.New("durability mode conflict") // 409
	ErrConflict     = errors.New("declaration conflict")     // 409
	ErrQueueFull    = errors.New("queue full")               // overflow policy reject
	ErrDiskFull     = errors.New("storage full")             // disk budget, free-space watermark, or no space to grow a log
	ErrUnavailable  = errors.New("queue unavailable")        // latched log, closing broker
	ErrStaleTag     = errors.New("unknown or stale delivery tag")
	ErrClosed       = errors.New("broker closed")
	ErrTooLarge     = errors.New("message too large")
	// ErrServedElsewhere: a cluster node was asked to act on a queue that
	// another node serves, where the request cannot be passed on (a purge,
	// a queue's state); the error's text names the node that serves it.
	ErrServedElsewhere = errors.New("queue served by another node") // 409
	// ErrOrphanLogs: the data directory holds queue logs that no
	// declaration in the metadata store names (declfile.go); a conflict.
	ErrOrphanLogs = fmt.Errorf("%w: queue logs without a declaration", ErrConflict)
	// ErrForwardBroken: a publish forwarded to its queue's owner failed
	// where a later publish of the same connection could be stored ahead
	// of its resend (the owner's connection lost, the queue moved). The
	// server ends the publishing connection, as the owner's loss would
	// have, so the client resends from its first unconfirmed publish.
	ErrForwardBroken = fmt.Errorf("%w: a forwarded publish failed", ErrUnavailable)
)

// ErrorClass is one entry of the error catalog: the errors that match Err
// (errors.Is) and what each interface calls them.
type ErrorClass struct {
	Err    error
	Code   string         // the admin API's "code" and the logs' name for it
	Wire   wire.ErrorCode // the client protocol's code
	Status int            // the admin API's HTTP status
}

// Catalog is the one ordered mapping of errors to codes, used by the wire
// server, the admin API and a cluster node forwarding to an owner. The
// checks go from the most general condition to the most specific, since
// an error may wrap more than one sentinel: a queue that failed to open is
// unavailable, whatever the cause. The first class with a given wire code
// is the one a forwarded wire error comes back as.
var Catalog = []ErrorClass{
	{ErrUnavailable, "unavailable", wire.CodeUnavailable, http.StatusServiceUnavailable},
	{wal.ErrLatched, "unavailable", wire.CodeUnavailable, http.StatusServiceUnavailable},
	{ErrClosed, "closed", wire.CodeUnavailable, http.StatusServiceUnavailable},
	{context.Canceled, "canceled", wire.CodeUnavailable, http.StatusServiceUnavailable},
	{context.DeadlineExceeded, "timeout", wire.CodeUnavailable, http.StatusGatewayTimeout},
	{ErrDiskFull, "disk_full", wire.CodeDiskFull, http.StatusInsufficientStorage},
	{ErrQueueFull, "queue_full", wire.CodeQueueFull, http.StatusTooManyRequests},
	{ErrTooLarge, "too_large", wire.CodeTooLarge, http.StatusRequestEntityTooLarge},
	{ErrConflict, "conflict", wire.CodeConflict, http.StatusConflict},
	{ErrModeConflict, "mode_conflict", wire.CodeConflict, http.StatusConflict},
	{ErrServedElsewhere, "served_elsewhere", wire.CodeServedElsewhere, http.StatusConflict},
	{ErrNotFound, "not_found", wire.CodeNotFound, http.StatusNotFound},
	{ErrStaleTag, "stale_tag", wire.CodeStaleTag, http.StatusConflict},
	{ErrInvalid, "invalid", wire.CodeBadRequest, http.StatusBadRequest},
}

// Internal is the class of an error the catalog does not name: a bug or
// an unexpected failure.
var Internal = ErrorClass{Code: "internal", Wire: wire.CodeInternal, Status: http.StatusInternalServerError}

// ClassOf is err's class: the first catalog entry it matches, else
// Internal.
func ClassOf(err error) ErrorClass {
	for _, c := range Catalog {
		if errors.Is(err, c.Err) {
			return c
		}
	}
	return Internal
}

// SentinelForWire is the sentinel a wire error code from another node
// stands for: the first catalog class with that code, and ErrUnavailable
// for codes no class has (the other node refused for a reason of its own,
// such as a token it does not accept).
func SentinelForWire(code wire.ErrorCode) error {
	for _, c := range Catalog {
		if c.Wire == code {
			return c.Err
		}
	}
	return ErrUnavailable
}
