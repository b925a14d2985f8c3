package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/wal"
)

var errEmptyToken = errors.New("admin: empty token")

// Error is an API error with its HTTP status and machine-readable code.
// Handlers return it for failures of their own (bad JSON, a missing
// token); the broker's sentinel errors are mapped by statusOf.
type Error struct {
	Status  int
	Code    string
	Err     error
	Details any // optional, written as "details"
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// invalid is a 400 for a request the handler cannot read.
func invalid(format string, args ...any) error {
	return &Error{Status: http.StatusBadRequest, Code: "invalid", Err: fmt.Errorf(format, args...)}
}

// errorBody is what every failed request returns.
type errorBody struct {
	Error   string `json:"error"`
	Code    string `json:"code"`
	Details any    `json:"details,omitempty"`
}

// statusOf maps an error to its HTTP status and code:
//
//	ErrInvalid                      400 invalid
//	ErrNotFound                     404 not_found
//	ErrModeConflict                 409 mode_conflict
//	ErrConflict                     409 conflict
//	ErrStaleTag                     409 stale_tag
//	ErrTooLarge                     413 too_large
//	ErrQueueFull                    429 queue_full (back off; consumers drain it)
//	ErrDiskFull                     507 disk_full
//	ErrUnavailable, wal.ErrLatched  503 unavailable
//	ErrClosed                       503 closed
//	context canceled (shutdown)     503 canceled
//	context deadline                504 timeout
//	anything else                   500 internal
func statusOf(err error) (int, string, any) {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e.Status, e.Code, e.Details
	case errors.Is(err, appliance.ErrInvalid):
		return http.StatusBadRequest, "invalid", nil
	case errors.Is(err, appliance.ErrNotFound):
		return http.StatusNotFound, "not_found", nil
	case errors.Is(err, appliance.ErrModeConflict):
		return http.StatusConflict, "mode_conflict", nil
	case errors.Is(err, appliance.ErrConflict):
		return http.StatusConflict, "conflict", nil
	case errors.Is(err, appliance.ErrStaleTag):
		return http.StatusConflict, "stale_tag", nil
	case errors.Is(err, appliance.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, "too_large", nil
	case errors.Is(err, appliance.ErrQueueFull):
		return http.StatusTooManyRequests, "queue_full", nil
	case errors.Is(err, appliance.ErrDiskFull):
		return http.StatusInsufficientStorage, "disk_full", nil
	case errors.Is(err, appliance.ErrUnavailable), errors.Is(err, wal.ErrLatched):
		return http.StatusServiceUnavailable, "unavailable", nil
	case errors.Is(err, appliance.ErrClosed):
		return http.StatusServiceUnavailable, "closed", nil
	case errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable, "canceled", nil
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, "timeout", nil
	}
	return http.StatusInternalServerError, "internal", nil
}
