package appliance

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// Record types in a partition's log. Publishes and settle events share the
// log, so replaying it rebuilds the partition exactly.
const (
	recPublish    byte = 1 // a message
	recAck        byte = 2 // consumer acknowledged: settled
	recRelease    byte = 3 // nack with requeue: ready again, one more delivery counted
	recDiscard    byte = 4 // nack without requeue, or dropped for overflow: settled
	recDeadLetter byte = 5 // a copy went to the dead-letter queue: settled
	recExpire     byte = 6 // lease expired: ready again, one more delivery counted
	// recMarker changes nothing: a replicated partition's new owner
	// writes one before it applies the records it recovered, so that
	// they are applied only once a record of its own epoch sits on
	// enough copies (partition.replayHeld).
	recMarker byte = 7
	// recPublishKeyed is a message published with a key: a recPublish
	// with the key after the id. The key picked the partition; it is
	// kept so that a copy made from the record (to a dead-letter queue)
	// is published with it and a consumer sees it. A message without a
	// key is stored as recPublish, as before keys were kept.
	recPublishKeyed byte = 8
)

// isPublish reports whether a record of type t is a message.
func isPublish(t byte) bool { return t == recPublish || t == recPublishKeyed }

// Header is one message header.
type Header struct {
	Key, Value string
}

// publishRecord is the body of a recPublish or recPublishKeyed record.
//
//	recPublish       i64 unix nanos | u16 len id | id | u16 n headers | (u16 k, u16 v)... | body
//	recPublishKeyed  i64 unix nanos | u16 len id | id | u16 len key | key | u16 n headers | ... | body
type publishRecord struct {
	At        time.Time
	MessageID string
	Key       string // "": stored as recPublish
	Headers   []Header
	Body      []byte
}

// recordType is the type of the record that stores p.
func (p publishRecord) recordType() byte {
	if p.Key != "" {
		return recPublishKeyed
	}
	return recPublish
}

var errBadEvent = errors.New("appliance: malformed log event")

// Limits of what a publish record holds: its lengths are u16.
const (
	// MaxMessageIDBytes is the longest message id (and MaxKeyBytes the
	// longest key), the wire protocol's string limit. The dedupe table's byte bound (QueueConfig.
	// DedupeMaxBytes) counts ids, so long ids shorten what it remembers
	// rather than grow it.
	MaxMessageIDBytes = math.MaxUint16
	MaxKeyBytes       = math.MaxUint16
	// MaxHeaders is the most headers a message carries; each key and
	// value is at most MaxHeaderBytes.
	MaxHeaders     = math.MaxUint16
	MaxHeaderBytes = math.MaxUint16
)

// checkEncodable refuses a message whose id or headers do not fit a
// publish record, which would otherwise be cut short when encoded.
func checkEncodable(m Message) error {
	if len(m.ID) > MaxMessageIDBytes {
		return fmt.Errorf("%w: message id of %d bytes (at most %d)", ErrInvalid, len(m.ID), MaxMessageIDBytes)
	}
	if len(m.Key) > MaxKeyBytes {
		return fmt.Errorf("%w: key of %d bytes (at most %d)", ErrInvalid, len(m.Key), MaxKeyBytes)
	}
	if len(m.Headers) > MaxHeaders {
		return fmt.Errorf("%w: %d headers (at most %d)", ErrInvalid, len(m.Headers), MaxHeaders)
	}
	for _, h := range m.Headers {
		if len(h.Key) > MaxHeaderBytes || len(h.Value) > MaxHeaderBytes {
			return fmt.Errorf("%w: header %.32q: key or value longer than %d bytes", ErrInvalid, h.Key, MaxHeaderBytes)
		}
	}
	return nil
}

// encodePublish encodes p as the payload of a record of type
// p.recordType().
func encodePublish(p publishRecord) []byte {
	n := 8 + 2 + len(p.MessageID) + 2 + len(p.Key) + 2 + len(p.Body)
	for _, h := range p.Headers {
		n += 4 + len(h.Key) + len(h.Value)
	}
	b := make([]byte, 0, n)
	b = binary.LittleEndian.AppendUint64(b, uint64(p.At.UnixNano()))
	b = appendString(b, p.MessageID)
	if p.Key != "" {
		b = appendString(b, p.Key)
	}
	b = binary.LittleEndian.AppendUint16(b, uint16(len(p.Headers)))
	for _, h := range p.Headers {
		b = appendString(b, h.Key)
		b = appendString(b, h.Value)
	}
	return append(b, p.Body...)
}

// decodePublish decodes the payload of a record of type typ, which
// isPublish.
func decodePublish(typ byte, b []byte) (publishRecord, error) {
	var p publishRecord
	if len(b) < 8 {
		return p, fmt.Errorf("publish record of %d bytes: %w", len(b), errBadEvent)
	}
	p.At = time.Unix(0, int64(binary.LittleEndian.Uint64(b)))
	b = b[8:]
	var err error
	if p.MessageID, b, err = readString(b); err != nil {
		return p, err
	}
	if typ == recPublishKeyed {
		if p.Key, b, err = readString(b); err != nil {
			return p, err
		}
		if p.Key == "" {
			return p, fmt.Errorf("keyed publish record with an empty key: %w", errBadEvent)
		}
	}
	if len(b) < 2 {
		return p, fmt.Errorf("publish record headers: %w", errBadEvent)
	}
	nh := int(binary.LittleEndian.Uint16(b))
	b = b[2:]
	if nh > len(b)/4 {
		return p, fmt.Errorf("publish record claims %d headers: %w", nh, errBadEvent)
	}
	if nh > 0 {
		p.Headers = make([]Header, nh)
	}
	for i := range p.Headers {
		if p.Headers[i].Key, b, err = readString(b); err != nil {
			return p, err
		}
		if p.Headers[i].Value, b, err = readString(b); err != nil {
			return p, err
		}
	}
	p.Body = b
	return p, nil
}

// settleRecord is the body of every settle event: the offset it settles.
func encodeSettle(offset uint64) []byte {
	return binary.LittleEndian.AppendUint64(make([]byte, 0, 8), offset)
}

func decodeSettle(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("settle record of %d bytes: %w", len(b), errBadEvent)
	}
	return binary.LittleEndian.Uint64(b), nil
}

func appendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func readString(b []byte) (string, []byte, error) {
	if len(b) < 2 {
		return "", nil, fmt.Errorf("string length: %w", errBadEvent)
	}
	n := int(binary.LittleEndian.Uint16(b))
	if len(b) < 2+n {
		return "", nil, fmt.Errorf("string of %d bytes in %d: %w", n, len(b)-2, errBadEvent)
	}
	return string(b[2 : 2+n]), b[2+n:], nil
}
