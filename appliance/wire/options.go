package wire

import "fmt"

// Limits and defaults for Options.
const (
	// DefaultMaxFrame is the frame length limit of the zero Options: 16 MiB.
	DefaultMaxFrame = 16 << 20
	// MinFrameLimit and MaxFrameLimit bound Options.MaxFrame.
	MinFrameLimit = 4 << 10
	MaxFrameLimit = 1 << 30
	// DefaultBufferSize is the read buffer and the write flush threshold.
	DefaultBufferSize = 64 << 10
	// minBufferSize is bufio's own minimum.
	minBufferSize = 16
)

// Options configure a Reader or a Writer. The zero value of every field
// means its default.
type Options struct {
	// MaxFrame limits a frame's length field (type byte plus body; the
	// frame takes 4 more bytes on the wire). A Reader refuses longer
	// frames with ErrFrameTooLarge; a Writer refuses to send them, and is
	// given the peer's limit (HelloOK.MaxFrame). Default 16 MiB; from
	// MinFrameLimit (4 KiB) to MaxFrameLimit (1 GiB).
	MaxFrame int
	// BufferSize is the Reader's bufio buffer and the number of buffered
	// bytes at which a Writer flushes by itself. Frames up to this size are
	// decoded straight from the read buffer. Default 64 KiB; at least 16.
	BufferSize int
	// BorrowPublishBodies makes a Reader decode the Body of a Publish
	// read from its buffer as a slice of that buffer, valid only until
	// the next ReadFrame, instead of a copy: for a caller that is done
	// with each publish's body before it reads on (the server, whose
	// broker copies the body into its log record). A frame larger than
	// the buffer owns its body all the same. Default false.
	BorrowPublishBodies bool
}

// Validate reports a value out of range. NewReader and NewWriter clamp
// such values instead.
func (o Options) Validate() error {
	if o.MaxFrame != 0 && (o.MaxFrame < MinFrameLimit || o.MaxFrame > MaxFrameLimit) {
		return fmt.Errorf("wire: MaxFrame %d out of range [%d, %d]", o.MaxFrame, MinFrameLimit, MaxFrameLimit)
	}
	if o.BufferSize != 0 && (o.BufferSize < minBufferSize || o.BufferSize > MaxFrameLimit) {
		return fmt.Errorf("wire: BufferSize %d out of range [%d, %d]", o.BufferSize, minBufferSize, MaxFrameLimit)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.MaxFrame == 0 {
		o.MaxFrame = DefaultMaxFrame
	}
	o.MaxFrame = clampFrameLimit(o.MaxFrame)
	if o.BufferSize == 0 {
		o.BufferSize = DefaultBufferSize
	}
	o.BufferSize = min(max(o.BufferSize, minBufferSize), MaxFrameLimit)
	return o
}

func clampFrameLimit(n int) int { return min(max(n, MinFrameLimit), MaxFrameLimit) }
