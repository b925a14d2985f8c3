package wire

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Field limits that follow from the encoding.
const (
	MaxStringLen = math.MaxUint16 // bytes in a string field
	MaxHeaders   = math.MaxUint16 // headers in a headers field
	// lengthSize is the u32 length that starts every frame.
	lengthSize = 4
)

// frameSpec is one row of the decoder table.
type frameSpec struct {
	name    string
	minBody int  // the body of the zero-valued frame, in the newest version
	fixed   bool // every body is exactly minBody bytes
	decode  func(d decoder) (Frame, error)
}

// specs is the decoder table, indexed by frame type. An empty row is an
// unknown type.
var specs = [256]frameSpec{
	TypeHello:          {"Hello", 2 + 2 + 2, false, decodeHello},
	TypeHelloOK:        {"HelloOK", 2 + 2 + 8 + 4 + 4, false, decodeHelloOK},
	TypeError:          {"Error", 8 + 2 + 2, false, decodeError},
	TypeHeartbeat:      {"Heartbeat", 0, true, decodeHeartbeat},
	TypeGoodbye:        {"Goodbye", 2, false, decodeGoodbye},
	TypeDeclare:        {"Declare", 8 + 2 + 1 + 2 + 2 + 4 + 4 + 8 + 8 + 1 + 4 + 8 + 8, false, decodeDeclare},
	TypeDeclared:       {"Declared", 8 + 2 + 1 + 2 + 1 + 2, false, decodeDeclared},
	TypePublish:        {"Publish", 8 + 2 + 2 + 2 + 2 + 4, false, decodePublish},
	TypeConfirm:        {"Confirm", 8 + 2 + 8 + 1 + 1, true, decodeConfirm},
	TypeSetMode:        {"SetMode", 8 + 2 + 1, false, decodeSetMode},
	TypeQueueInfo:      {"QueueInfo", 8 + 2, false, decodeQueueInfo},
	TypeQueueInfoReply: {"QueueInfoReply", 8 + 2 + 1 + 8 + 8 + 8 + 4 + 2 + 2, false, decodeQueueInfoReply},
	TypePurgeQueue:     {"PurgeQueue", 8 + 2, false, decodePurgeQueue},
	TypePurged:         {"Purged", 8 + 2 + 8, false, decodePurged},
	TypeDeleteQueue:    {"DeleteQueue", 8 + 2 + 1, false, decodeDeleteQueue},
	TypeDeleted:        {"Deleted", 8 + 2, false, decodeDeleted},
	TypeSubscribe:      {"Subscribe", 8 + 4 + 2 + 4, false, decodeSubscribe},
	TypeSubscribed:     {"Subscribed", 8 + 4 + 2, true, decodeSubscribed},
	TypeUnsubscribe:    {"Unsubscribe", 8 + 4, true, decodeUnsubscribe},
	TypeUnsubscribed:   {"Unsubscribed", 8 + 4, true, decodeUnsubscribed},
	TypeCredit:         {"Credit", 4 + 4, true, decodeCredit},
	TypeDeliver:        {"Deliver", 4 + 8 + 2 + 8 + 8 + 4 + 2 + 2 + 2 + 4 + 8, false, decodeDeliver},
	TypeAck:            {"Ack", 4 + 4, false, decodeAck},
	TypeNack:           {"Nack", 4 + 4 + 1 + 4, false, decodeNack},
	TypeSettleError:    {"SettleError", 4 + 8 + 2 + 2, false, decodeSettleError},
	TypeExtend:         {"Extend", 4 + 4, false, decodeExtend},
}

// deliverV2Bytes is what version 2 added to the zero Deliver: Incarnation
// (u64) and an empty Key (u16).
const deliverV2Bytes = 8 + 2

// declareV3Bytes is what version 3 added to the zero Declare: the dedupe
// table's bounds (two u64).
const declareV3Bytes = 8 + 8

// confirmV4Bytes is what version 4 added to Confirm: its Durability (u8).
const confirmV4Bytes = 1

// nackV5Bytes is what version 5 added to Nack: its DelayMillis (u32).
const nackV5Bytes = 4

// deliverV6Bytes is what version 6 added to Deliver: PublishedAt (u64).
const deliverV6Bytes = 8

// minBody is the body of the zero-valued frame of type t in version v.
func minBody(t FrameType, v uint16) int {
	switch {
	case t == TypeDeliver && v < 2:
		return specs[t].minBody - deliverV2Bytes - deliverV6Bytes
	case t == TypeDeliver && v < 6:
		return specs[t].minBody - deliverV6Bytes
	case t == TypeDeclare && v < 3:
		return specs[t].minBody - declareV3Bytes
	case t == TypeConfirm && v < 4:
		return specs[t].minBody - confirmV4Bytes
	case t == TypeNack && v < 5:
		return specs[t].minBody - nackV5Bytes
	}
	return specs[t].minBody
}

// sinceVersion is the first version that has frame type t.
func sinceVersion(t FrameType) uint16 {
	switch t {
	case TypeSetMode:
		return 4
	case TypeQueueInfo, TypeQueueInfoReply, TypePurgeQueue, TypePurged, TypeDeleteQueue, TypeDeleted, TypeExtend:
		return 5
	}
	return MinVersion
}

// checkVersion refuses, before it is encoded, a frame that a peer
// speaking version v would reject: a frame type v does not have, or an
// error code it does not define. Without it a Writer would send bytes
// that close the connection at the other end. It also refuses a Nack
// with a delay in a version without the field, which would otherwise
// arrive as a requeue at once.
func checkVersion(f Frame, v uint16) error {
	t := f.Type()
	if v < sinceVersion(t) {
		return &FrameError{Type: t, Offset: -1, Err: ErrUnknownFrame,
			Reason: fmt.Sprintf("not a frame type of protocol version %d (version %d has it)", v, sinceVersion(t))}
	}
	var code ErrorCode
	switch f := f.(type) {
	case *Error:
		code = f.Code
	case *SettleError:
		code = f.Code
	case *Nack:
		if f.DelayMillis != 0 && v < 5 {
			return malformed(t, "DelayMillis", -1, fmt.Sprintf("a delay is not a field of protocol version %d", v))
		}
		return nil
	default:
		return nil
	}
	if !code.validIn(v) {
		return malformed(t, "Code", -1, fmt.Sprintf("error code %s is not defined in protocol version %d", code, v))
	}
	return nil
}

// checkBodyLen rejects a body length the frame type can never have in
// version v, before the body is read.
func checkBodyLen(t FrameType, n int, v uint16) error {
	s := &specs[t]
	if s.decode == nil || v < sinceVersion(t) {
		return &FrameError{Type: t, Offset: -1, Reason: fmt.Sprintf("not a frame type of protocol version %d", v), Err: ErrUnknownFrame}
	}
	m := minBody(t, v)
	if n < m {
		return malformed(t, "", -1, fmt.Sprintf("body of %d bytes is below the minimum of %d", n, m))
	}
	if s.fixed && n != m {
		return malformed(t, "", -1, fmt.Sprintf("body of %d bytes, want exactly %d", n, m))
	}
	return nil
}

// Decode decodes the body of a frame of type t, in the newest version's
// layout. The frame copies what it keeps, so body may be reused after the
// call.
func Decode(t FrameType, body []byte) (Frame, error) { return decode(t, body, false, Version) }

// decode decodes a body in version v's layout; with alias set, byte-slice
// fields point into body instead of copying it.
func decode(t FrameType, body []byte, alias bool, v uint16) (Frame, error) {
	if err := checkBodyLen(t, len(body), v); err != nil {
		return nil, err
	}
	f, err := specs[t].decode(decoder{typ: t, version: v, body: body, alias: alias})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// AppendFrame validates f and appends it, length and type included, to dst,
// in the newest version's layout. It refuses a frame longer than
// MaxFrameLimit; a Writer also applies the peer's limit and its version.
func AppendFrame(dst []byte, f Frame) ([]byte, error) {
	return appendFrame(dst, f, MaxFrameLimit, Version)
}

func appendFrame(dst []byte, f Frame, maxFrame int, v uint16) ([]byte, error) {
	if err := f.Validate(); err != nil {
		return dst, err
	}
	if err := checkVersion(f, v); err != nil {
		return dst, err
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, byte(f.Type()))
	if vf, ok := f.(versionedFrame); ok {
		dst = vf.appendBodyVersion(dst, v)
	} else {
		dst = f.AppendBody(dst)
	}
	n := len(dst) - start - lengthSize
	if n > maxFrame {
		return dst[:start], &FrameError{Type: f.Type(), Offset: -1, Err: ErrFrameTooLarge,
			Reason: fmt.Sprintf("length %d exceeds the limit of %d", n, maxFrame)}
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(n))
	return dst, nil
}

// Encoding. AppendBody never fails: on a frame that does not Validate it
// truncates over-long fields so the output stays a well-formed frame, and
// the peer sees the truncated value. Writers validate first.

func appendU8(b []byte, v uint8) []byte   { return append(b, v) }
func appendU16(b []byte, v uint16) []byte { return binary.BigEndian.AppendUint16(b, v) }
func appendU32(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }
func appendU64(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendString(b []byte, s string) []byte {
	s = s[:min(len(s), MaxStringLen)]
	b = appendU16(b, uint16(len(s)))
	return append(b, s...)
}

func appendBytes(b []byte, p []byte) []byte {
	p = p[:min(uint64(len(p)), math.MaxUint32)]
	b = appendU32(b, uint32(len(p)))
	return append(b, p...)
}

func appendHeaders(b []byte, hs []Header) []byte {
	hs = hs[:min(len(hs), MaxHeaders)]
	b = appendU16(b, uint16(len(hs)))
	for _, h := range hs {
		b = appendString(b, h.Key)
		b = appendString(b, h.Value)
	}
	return b
}

func appendTags(b []byte, tags []uint64) []byte {
	tags = tags[:min(uint64(len(tags)), math.MaxUint32)]
	b = appendU32(b, uint32(len(tags)))
	for _, t := range tags {
		b = appendU64(b, t)
	}
	return b
}

// headersLen is the encoded size of a headers field.
func headersLen(hs []Header) int {
	n := 2
	for _, h := range hs {
		n += 2 + len(h.Key) + 2 + len(h.Value)
	}
	return n
}

// DeliverLen is the frame length (type byte and body) of the Deliver that
// would carry p's message, in the newest version (the longest). A server
// refuses with CodeTooLarge a publish whose DeliverLen exceeds the
// MaxFrame it announced, so that it never has to send a frame larger than
// that.
func DeliverLen(p *Publish) int {
	return deliverLen(p.MessageID, p.Key, p.Headers, len(p.Body))
}

// deliverLen is the frame length of a Deliver in the newest layout.
func deliverLen(id, key string, hs []Header, body int) int {
	// minBody counts the empty headers field, headersLen the whole one.
	return 1 + specs[TypeDeliver].minBody - 2 + len(id) + len(key) + headersLen(hs) + body
}

// FrameLen is the frame length (type byte and body) of f in the newest
// version's layout.
func (f *Deliver) FrameLen() int { return deliverLen(f.MessageID, f.Key, f.Headers, len(f.Body)) }

// FrameLenIn is the frame length of f in version v's layout: shorter than
// FrameLen by the fields v does not have.
func (f *Deliver) FrameLenIn(v uint16) int {
	n := f.FrameLen()
	if v < 6 {
		n -= deliverV6Bytes
	}
	if v < 2 {
		n -= deliverV2Bytes + len(f.Key)
	}
	return n
}
