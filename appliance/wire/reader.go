package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// readChunk is the most a Reader allocates ahead of the bytes it has
// received: a large body is read in growing chunks, so a peer that claims
// a large length and sends little costs little.
const readChunk = 64 << 10

// Reader reads frames from a connection through a bufio.Reader.
//
// A frame up to the buffer size is decoded straight from the read buffer,
// copying what it keeps (but a Publish's Body with
// Options.BorrowPublishBodies). A larger one is read into a buffer of its
// own, which the decoded frame's byte slices (Body) point into and which
// the Reader never reuses.
type Reader struct {
	src      io.Reader // what br reads from
	br       *bufio.Reader
	maxFrame int
	version  uint16 // the layout frames are decoded in
	borrow   bool   // Options.BorrowPublishBodies
}

// NewReader returns a Reader over r. If r is a *bufio.Reader at least
// opts.BufferSize large it is used as is. Out-of-range options are clamped.
func NewReader(r io.Reader, opts Options) *Reader {
	o := opts.withDefaults()
	return &Reader{src: r, br: bufio.NewReaderSize(r, o.BufferSize), maxFrame: o.MaxFrame, version: Version,
		borrow: o.BorrowPublishBodies}
}

// SetVersion makes the Reader decode frames in version v's layout (from
// MinVersion to Version; others are clamped into that range): the version
// HelloOK settled for the connection. Hello and HelloOK are the same in
// every version, so they are read before it is known.
func (r *Reader) SetVersion(v uint16) { r.version = clampVersion(v) }

// SetBufferSize gives the Reader a read buffer of n bytes (clamped like
// Options.BufferSize) if its buffer is smaller, keeping the bytes already
// buffered. A server reads a peer's Hello with a small buffer, so that a
// connection that has not authenticated costs little, and grows it after.
func (r *Reader) SetBufferSize(n int) {
	n = (Options{BufferSize: n}).withDefaults().BufferSize
	if n <= r.br.Size() {
		return
	}
	pending, _ := r.br.Peek(r.br.Buffered()) // cannot fail: the bytes are buffered
	src := r.src
	if len(pending) > 0 {
		src = io.MultiReader(bytes.NewReader(bytes.Clone(pending)), r.src)
	}
	r.src, r.br = src, bufio.NewReaderSize(src, n)
}

// BufferSize is the size of the Reader's read buffer.
func (r *Reader) BufferSize() int { return r.br.Size() }

// MaxFrame is the largest frame length the Reader accepts.
func (r *Reader) MaxFrame() int { return r.maxFrame }

// SetMaxFrame changes the limit, clamped to [MinFrameLimit, MaxFrameLimit].
// A client may raise it to the server's HelloOK.MaxFrame.
func (r *Reader) SetMaxFrame(n int) { r.maxFrame = clampFrameLimit(n) }

// Buffered is the number of bytes read from the connection and not yet
// consumed: a server can keep handling frames while it is above zero and
// flush its replies once it drops to zero.
func (r *Reader) Buffered() int { return r.br.Buffered() }

// FrameBuffered reports whether a whole frame is buffered, so that
// ReadFrame reads nothing from the connection.
func (r *Reader) FrameBuffered() bool {
	n := r.br.Buffered()
	if n < lengthSize {
		return false
	}
	hdr, _ := r.br.Peek(lengthSize) // buffered: no read
	return uint64(n) >= lengthSize+uint64(binary.BigEndian.Uint32(hdr))
}

// ReadFrame reads the next frame. It returns io.EOF, unwrapped, when the
// connection ends cleanly between frames; a wrapped io.ErrUnexpectedEOF
// when it ends inside one; an error matching ErrProtocol when the frame
// breaks the protocol; and the connection's own errors wrapped. After any
// error but io.EOF the stream position is lost: close the connection.
func (r *Reader) ReadFrame() (Frame, error) {
	hdr, err := r.br.Peek(lengthSize)
	if err != nil {
		if len(hdr) == 0 && errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("wire: read frame length: %w", noEOF(err))
	}
	length := binary.BigEndian.Uint32(hdr)
	if length == 0 {
		return nil, malformed(0, "", -1, "frame length 0 is below the minimum of 1")
	}
	if uint64(length) > uint64(r.maxFrame) {
		return nil, &FrameError{Offset: -1, Err: ErrFrameTooLarge,
			Reason: fmt.Sprintf("length %d exceeds the limit of %d", length, r.maxFrame)}
	}
	r.br.Discard(lengthSize) // cannot fail: the bytes are buffered
	b, err := r.br.ReadByte()
	if err != nil {
		return nil, fmt.Errorf("wire: read frame type: %w", noEOF(err))
	}
	t, n := FrameType(b), int(length)-1
	if err := checkBodyLen(t, n, r.version); err != nil {
		return nil, err
	}
	if n <= r.br.Size() {
		return r.decodeBuffered(t, n)
	}
	return r.decodeLarge(t, n)
}

// decodeBuffered decodes a body that fits in the read buffer, in place.
func (r *Reader) decodeBuffered(t FrameType, n int) (Frame, error) {
	body, err := r.br.Peek(n)
	if err != nil {
		return nil, fmt.Errorf("wire: read %s body of %d bytes: %w", t, n, noEOF(err))
	}
	f, err := decode(t, body, r.borrow && t == TypePublish, r.version)
	r.br.Discard(n)
	return f, err
}

// decodeLarge reads a body larger than the read buffer into a buffer of its
// own, growing it as bytes arrive, and lets the frame keep it.
func (r *Reader) decodeLarge(t FrameType, n int) (Frame, error) {
	body := make([]byte, 0, min(n, readChunk))
	for len(body) < n {
		if len(body) == cap(body) {
			grown := make([]byte, len(body), min(n, 2*cap(body)))
			copy(grown, body)
			body = grown
		}
		k, err := io.ReadFull(r.br, body[len(body):cap(body)])
		body = body[:len(body)+k]
		if err != nil {
			return nil, fmt.Errorf("wire: read %s body of %d bytes: %w", t, n, noEOF(err))
		}
	}
	return decode(t, body, true, r.version)
}

// noEOF turns io.EOF inside a frame into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
