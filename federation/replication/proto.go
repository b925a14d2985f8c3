package replication

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/fibril-edge/fibril/appliance"
)

// ErrFrame is returned for a malformed frame.
var ErrFrame = errors.New("replication: malformed frame")

// MaxFrame bounds a frame's size.
const MaxFrame = 16 << 20

// A stream's buffers: the records' direction, and the answers' (a
// Position or a Pull, under 32 bytes; a Refuse's reason may be longer,
// and is read past the buffer).
const (
	recordBuffer = 4 << 10
	answerBuffer = 512
)

// smallFrame is the largest frame read into a buffer allocated whole
// from its announced length; a larger one's buffer grows as it arrives.
const smallFrame = 64 << 10

const (
	typeHello    byte = 1
	typePosition byte = 2
	typeBatch    byte = 3
	typeRefuse   byte = 4
	typePull     byte = 5
	typeHead     byte = 6
)

// Frame is one protocol message.
type Frame interface{ frameType() byte }

// Hello opens the stream for one partition at the owner's epoch.
type Hello struct {
	Epoch uint64
	// Incarnation is the queue declaration's (control.Queue.Incarnation).
	Incarnation uint64
	Durability  appliance.Durability // the queue's mode
	Partition   uint32
	// Head is the lowest offset the owner's log still holds; the sender
	// fills it in at each connection.
	Head uint64
	// End is the owner's written end when the stream opened: a copy
	// created empty catches up to it before it counts as a witness in a
	// recovery (copies.go).
	End   uint64
	Queue string
	Owner string
	// History is the owner's log's history (history.go); its last
	// interval is the instance writing now. The follower takes the stream
	// only if its copy is a prefix of the log this history describes.
	History History
}

// Head is the owner's log head after its retention moved it: the
// follower drops what lies below it, never past its own durable end.
type Head struct {
	Offset uint64
}

// Position is a follower's progress: written and durable, each one past
// the last record it covers.
type Position struct {
	Written uint64
	Durable uint64
}

// Record is one log record in a Batch.
type Record struct {
	Type    uint8
	Payload []byte
}

// Batch carries consecutive records starting at offset First. CatchUp
// marks a batch of the catch-up path: the follower appends it synced
// whatever the queue's mode, and Pulls the next once it is synced.
type Batch struct {
	First   uint64
	CatchUp bool
	Records []Record
}

// Refuse ends the stream with a reason (a stale epoch, an unknown
// partition).
type Refuse struct{ Reason string }

// Pull asks for the next catch-up batch, from offset From (the follower's
// durable position, every record before it synced), of at most Max
// payload bytes (the first record always comes; zero means the owner's
// bound).
type Pull struct {
	From uint64
	Max  uint32
}

func (Hello) frameType() byte    { return typeHello }
func (Position) frameType() byte { return typePosition }
func (Batch) frameType() byte    { return typeBatch }
func (Refuse) frameType() byte   { return typeRefuse }
func (Pull) frameType() byte     { return typePull }
func (Head) frameType() byte     { return typeHead }

// appendFrame encodes f onto b.
func appendFrame(b []byte, f Frame) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, f.frameType())
	switch f := f.(type) {
	case Hello:
		b = binary.LittleEndian.AppendUint64(b, f.Epoch)
		b = binary.LittleEndian.AppendUint64(b, f.Incarnation)
		b = append(b, byte(f.Durability))
		b = binary.LittleEndian.AppendUint32(b, f.Partition)
		b = binary.LittleEndian.AppendUint64(b, f.Head)
		b = binary.LittleEndian.AppendUint64(b, f.End)
		b = appendBytes(b, []byte(f.Queue))
		b = appendBytes(b, []byte(f.Owner))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(f.History)))
		for _, iv := range f.History {
			b = binary.LittleEndian.AppendUint64(b, iv.Instance)
			b = binary.LittleEndian.AppendUint64(b, iv.From)
			b = binary.LittleEndian.AppendUint64(b, iv.Epoch)
		}
	case Position:
		b = binary.LittleEndian.AppendUint64(b, f.Written)
		b = binary.LittleEndian.AppendUint64(b, f.Durable)
	case Batch:
		b = binary.LittleEndian.AppendUint64(b, f.First)
		var c byte
		if f.CatchUp {
			c = 1
		}
		b = append(b, c)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(f.Records)))
		for _, r := range f.Records {
			b = append(b, r.Type)
			b = appendBytes(b, r.Payload)
		}
	case Refuse:
		b = appendBytes(b, []byte(f.Reason))
	case Pull:
		b = binary.LittleEndian.AppendUint64(b, f.From)
		b = binary.LittleEndian.AppendUint32(b, f.Max)
	case Head:
		b = binary.LittleEndian.AppendUint64(b, f.Offset)
	}
	binary.LittleEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

func appendBytes(b, p []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(p)))
	return append(b, p...)
}

// readFrame reads one frame.
func readFrame(r *bufio.Reader) (Frame, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n < 1 || n > MaxFrame {
		return nil, fmt.Errorf("%w: length %d", ErrFrame, n)
	}
	if n <= smallFrame { // one allocation of the frame's size
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return nil, fmt.Errorf("replication: read frame: %w", err)
		}
		return decodeFrame(body)
	}
	// A larger frame's buffer grows as bytes arrive: a peer that announces
	// a large frame and sends nothing costs its announcement nothing.
	var body bytes.Buffer
	if _, err := io.CopyN(&body, r, int64(n)); err != nil {
		return nil, fmt.Errorf("replication: read frame: %w", err)
	}
	return decodeFrame(body.Bytes())
}

// decodeFrame decodes a frame's type and body.
func decodeFrame(body []byte) (Frame, error) {
	d := decoder{b: body[1:]}
	var f Frame
	switch body[0] {
	case typeHello:
		f = Hello{Epoch: d.u64(), Incarnation: d.u64(), Durability: appliance.Durability(d.u8()), Partition: d.u32(), Head: d.u64(),
			End: d.u64(), Queue: string(d.bytes()), Owner: string(d.bytes()), History: d.history()}
	case typePosition:
		f = Position{Written: d.u64(), Durable: d.u64()}
	case typeBatch:
		bt := Batch{First: d.u64()}
		switch d.u8() {
		case 0:
		case 1:
			bt.CatchUp = true
		default:
			return nil, fmt.Errorf("%w: batch flag", ErrFrame)
		}
		n := d.u32()
		if uint64(n) > uint64(len(d.b))/5 { // each record takes at least 5 bytes
			return nil, fmt.Errorf("%w: %d records in %d bytes", ErrFrame, n, len(d.b))
		}
		bt.Records = make([]Record, 0, n)
		for range n {
			bt.Records = append(bt.Records, Record{Type: d.u8(), Payload: d.bytes()})
		}
		f = bt
	case typeRefuse:
		f = Refuse{Reason: string(d.bytes())}
	case typePull:
		f = Pull{From: d.u64(), Max: d.u32()}
	case typeHead:
		f = Head{Offset: d.u64()}
	default:
		return nil, fmt.Errorf("%w: type %d", ErrFrame, body[0])
	}
	if d.err || len(d.b) != 0 {
		return nil, fmt.Errorf("%w: type %d body of %d bytes", ErrFrame, body[0], len(body)-1)
	}
	return f, nil
}

// decoder reads fixed fields and remembers the first short read.
type decoder struct {
	b   []byte
	err bool
}

func (d *decoder) take(n int) []byte {
	if d.err || len(d.b) < n {
		d.err = true
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) u8() uint8 {
	if p := d.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if p := d.take(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if p := d.take(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

// history reads a u32 count of (u64 instance, u64 from) intervals, each
// starting no lower than the one before.
func (d *decoder) history() History {
	n := d.u32()
	if d.err || uint64(n)*24 > uint64(len(d.b)) {
		d.err = true
		return nil
	}
	var h History
	for range n {
		iv := Interval{Instance: d.u64(), From: d.u64(), Epoch: d.u64()}
		if len(h) > 0 && iv.From < h[len(h)-1].From {
			d.err = true
			return nil
		}
		h = append(h, iv)
	}
	return h
}

func (d *decoder) bytes() []byte {
	n := d.u32()
	if d.err || uint64(n) > uint64(len(d.b)) {
		d.err = true
		return nil
	}
	return d.take(int(n))
}
