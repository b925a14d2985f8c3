package admin

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/fibril-edge/fibril/appliance"
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

// StatusOf maps an error to its HTTP status and code: an *Error of the
// API's own as it says, a broker error by its class in the broker's error
// catalog (appliance.Catalog), which the wire server uses too.
func StatusOf(err error) (int, string, any) {
	var e *Error
	if errors.As(err, &e) {
		return e.Status, e.Code, e.Details
	}
	c := appliance.ClassOf(err)
	return c.Status, c.Code, nil
}
