package server

import (
	"errors"
	"strings"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/wire"
)

// codeOf maps a broker error to its wire code. The checks go from the most
// specific condition to the most general, since an error may wrap more
// than one sentinel (a queue that failed to open is unavailable, whatever
// the cause).
func codeOf(err error) wire.ErrorCode {
	switch {
	case errors.Is(err, appliance.ErrUnavailable), errors.Is(err, appliance.ErrClosed):
		return wire.CodeUnavailable
	case errors.Is(err, appliance.ErrDiskFull):
		return wire.CodeDiskFull
	case errors.Is(err, appliance.ErrQueueFull):
		return wire.CodeQueueFull
	case errors.Is(err, appliance.ErrTooLarge):
		return wire.CodeTooLarge
	case errors.Is(err, appliance.ErrModeConflict), errors.Is(err, appliance.ErrConflict):
		return wire.CodeConflict
	case errors.Is(err, appliance.ErrNotFound):
		return wire.CodeNotFound
	case errors.Is(err, appliance.ErrStaleTag):
		return wire.CodeStaleTag
	case errors.Is(err, appliance.ErrInvalid):
		return wire.CodeBadRequest
	}
	return wire.CodeInternal
}

// errorFrame answers request corr with err. An internal error is logged:
// the client sees only that something failed.
func (c *conn) errorFrame(corr uint64, err error) *wire.Error {
	code := codeOf(err)
	if code == wire.CodeInternal {
		c.log.Error("request failed", "corr", corr, "err", err)
	}
	return &wire.Error{Corr: corr, Code: code, Message: clip(err.Error(), 1024)}
}

func toValidUTF8(s string) string { return strings.ToValidUTF8(s, "") }
