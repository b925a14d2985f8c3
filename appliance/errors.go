package appliance

import "errors"

// Sentinel errors; callers tell them apart with errors.Is. The wire server
// and the admin API map each to a code or an HTTP status.
var (
	ErrInvalid      = errors.New("invalid request")          // 400
	ErrNotFound     = errors.New("queue not found")          // 404
	ErrModeConflict = errors.New("durability mode conflict") // 409
	ErrConflict     = errors.New("declaration conflict")     // 409
	ErrQueueFull    = errors.New("queue full")               // overflow policy reject
	ErrDiskFull     = errors.New("storage full")             // disk budget, free-space watermark, or no space for a new segment
	ErrUnavailable  = errors.New("queue unavailable")        // latched log, closing broker
	ErrStaleTag     = errors.New("unknown or stale delivery tag")
	ErrClosed       = errors.New("broker closed")
	ErrTooLarge     = errors.New("message too large")
)
