package wire

import (
	"fmt"
	"io"
)

// Writer encodes frames into a buffer and writes the buffer to the
// connection on Flush, or by itself once BufferSize bytes are waiting.
type Writer struct {
	w        io.Writer
	buf      []byte
	maxFrame int    // the peer's limit
	version  uint16 // the layout frames are encoded in
	flushAt  int
	err      error // the first write error; sticks
}

// NewWriter returns a Writer to w. opts.MaxFrame is the peer's limit: a
// client starts with the default and sets the server's HelloOK.MaxFrame
// with SetMaxFrame. Out-of-range options are clamped.
func NewWriter(w io.Writer, opts Options) *Writer {
	o := opts.withDefaults()
	return &Writer{w: w, maxFrame: o.MaxFrame, version: Version, flushAt: o.BufferSize}
}

// SetVersion makes the Writer encode frames in version v's layout (from
// MinVersion to Version; others are clamped into that range), leaving out
// the fields v does not have.
func (w *Writer) SetVersion(v uint16) { w.version = clampVersion(v) }

func clampVersion(v uint16) uint16 { return min(max(v, MinVersion), Version) }

// SetMaxFrame sets the peer's limit, clamped to [MinFrameLimit,
// MaxFrameLimit].
func (w *Writer) SetMaxFrame(n int) { w.maxFrame = clampFrameLimit(n) }

// MaxFrame is the largest frame length the Writer sends.
func (w *Writer) MaxFrame() int { return w.maxFrame }

// Buffered is the number of encoded bytes waiting for Flush.
func (w *Writer) Buffered() int { return len(w.buf) }

// WriteFrame validates f and adds it to the buffer, flushing if the buffer
// has reached BufferSize. A frame that fails Validate or is longer than
// MaxFrame is refused with an error matching ErrProtocol (ErrMalformed or
// ErrFrameTooLarge); nothing of it is written and the Writer stays usable.
// A write error sticks: every later call returns it.
func (w *Writer) WriteFrame(f Frame) error {
	if w.err != nil {
		return w.err
	}
	if w.buf == nil {
		w.buf = make([]byte, 0, w.flushAt)
	}
	buf, err := appendFrame(w.buf, f, w.maxFrame, w.version)
	w.buf = buf
	if err != nil {
		return err
	}
	if len(w.buf) >= w.flushAt {
		return w.Flush()
	}
	return nil
}

// Flush writes the buffered frames to the connection.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.w.Write(w.buf)
	// Keep one buffer's worth of memory between flushes, not the largest
	// frame ever written.
	if cap(w.buf) > 4*w.flushAt {
		w.buf = nil
	} else {
		w.buf = w.buf[:0]
	}
	if err != nil {
		w.err = fmt.Errorf("wire: write: %w", err)
		return w.err
	}
	return nil
}
