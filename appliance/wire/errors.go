package wire

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Compare with errors.Is; the package returns them wrapped
// in a *FrameError that says which frame and field.
var (
	// ErrProtocol is matched by every *FrameError: the peer broke the
	// protocol (or, from a Writer, the frame would have), and a connection
	// that read it must be closed.
	ErrProtocol = errors.New("wire: protocol violation")
	// ErrFrameTooLarge: a frame's length is above the limit.
	ErrFrameTooLarge = errors.New("wire: frame too large")
	// ErrUnknownFrame: a frame type that is not in the table.
	ErrUnknownFrame = errors.New("wire: unknown frame type")
	// ErrMalformed: a length below the minimum, a truncated field, trailing
	// bytes, an invalid enum or bool value, or text that is not UTF-8.
	ErrMalformed = errors.New("wire: malformed frame")
)

// FrameError says what is wrong with a frame. Err is ErrFrameTooLarge,
// ErrUnknownFrame or ErrMalformed; errors.Is also matches ErrProtocol.
type FrameError struct {
	Type   FrameType // the frame's type; 0 if it was not read
	Field  string    // the field at fault, "" for the frame as a whole
	Offset int       // byte offset of Field in the body, -1 if none
	Reason string
	Err    error
}

func (e *FrameError) Error() string {
	var b strings.Builder
	b.WriteString(e.Err.Error())
	if e.Type != 0 {
		fmt.Fprintf(&b, " (%s)", e.Type)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": field %s", e.Field)
		if e.Offset >= 0 {
			fmt.Fprintf(&b, " at body byte %d", e.Offset)
		}
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

func (e *FrameError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrProtocol) true for every frame error.
func (e *FrameError) Is(target error) bool { return target == ErrProtocol }

func malformed(t FrameType, field string, offset int, reason string) *FrameError {
	return &FrameError{Type: t, Field: field, Offset: offset, Reason: reason, Err: ErrMalformed}
}

// CodeOf is the error code a server sends for err: CodeTooLarge for
// ErrFrameTooLarge, CodeBadRequest for other protocol errors, the code of a
// received *Error, and CodeInternal for anything else. CodeOf(nil) is 0.
func CodeOf(err error) ErrorCode {
	var remote *Error
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrFrameTooLarge):
		return CodeTooLarge
	case errors.Is(err, ErrProtocol):
		return CodeBadRequest
	case errors.As(err, &remote):
		return remote.Code
	}
	return CodeInternal
}
