package wire

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// decoder reads a body front to back. The first failure sticks: later reads
// return zero values, and finish reports it.
type decoder struct {
	typ     FrameType
	version uint16 // the protocol version whose layout the body has
	body    []byte
	off     int
	alias   bool
	err     *FrameError
}

func (d *decoder) fail(field string, offset int, reason string) {
	if d.err == nil {
		d.err = malformed(d.typ, field, offset, reason)
	}
}

// take returns the next n bytes, or nil after a failure.
func (d *decoder) take(field string, n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if left := uint64(len(d.body) - d.off); n > left {
		d.fail(field, d.off, fmt.Sprintf("truncated: needs %d bytes, %d left", n, left))
		return nil
	}
	b := d.body[d.off : d.off+int(n)]
	d.off += int(n)
	return b
}

func (d *decoder) u8(field string) uint8 {
	if b := d.take(field, 1); b != nil {
		return b[0]
	}
	return 0
}

func (d *decoder) u16(field string) uint16 {
	if b := d.take(field, 2); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (d *decoder) u32(field string) uint32 {
	if b := d.take(field, 4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) u64(field string) uint64 {
	if b := d.take(field, 8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

func (d *decoder) bool(field string) bool {
	off := d.off
	v := d.u8(field)
	if v > 1 {
		d.fail(field, off, fmt.Sprintf("bool value %d (want 0 or 1)", v))
	}
	return v == 1
}

// enum reads a u8 that must be at most maxValid and at least minValid.
func (d *decoder) enum(field string, minValid, maxValid uint8) uint8 {
	off := d.off
	v := d.u8(field)
	if d.err == nil && (v < minValid || v > maxValid) {
		d.fail(field, off, fmt.Sprintf("value %d (want %d to %d)", v, minValid, maxValid))
	}
	return v
}

func (d *decoder) code(field string) ErrorCode {
	off := d.off
	c := ErrorCode(d.u16(field))
	if d.err == nil && !c.validIn(d.version) {
		d.fail(field, off, fmt.Sprintf("error code %d is not defined in protocol version %d", uint16(c), d.version))
	}
	return c
}

func (d *decoder) str(field string, text bool) string {
	off := d.off
	n := d.u16(field)
	b := d.take(field, uint64(n))
	if d.err != nil || len(b) == 0 {
		return ""
	}
	if text && !utf8.Valid(b) {
		d.fail(field, off, "text is not valid UTF-8")
		return ""
	}
	return string(b)
}

// text reads a string that must be UTF-8: names, messages, header keys.
func (d *decoder) text(field string) string { return d.str(field, true) }

// opaque reads a string of any bytes.
func (d *decoder) opaque(field string) string { return d.str(field, false) }

// bytes reads a u32-length byte slice; empty decodes as nil.
func (d *decoder) bytes(field string) []byte {
	n := d.u32(field)
	b := d.take(field, uint64(n))
	if len(b) == 0 {
		return nil
	}
	if d.alias {
		return b[:len(b):len(b)]
	}
	return append([]byte(nil), b...)
}

// headers reads the Headers field (the only one there is; constant field
// names keep the loop free of allocations).
func (d *decoder) headers() []Header {
	const field = "Headers"
	off := d.off
	n := uint64(d.u16(field))
	if d.err != nil || n == 0 {
		return nil
	}
	// Every header takes at least its two string lengths.
	if left := uint64(len(d.body) - d.off); n*4 > left {
		d.fail(field, off, fmt.Sprintf("%d headers cannot fit in the %d bytes left", n, left))
		return nil
	}
	hs := make([]Header, n)
	for i := range hs {
		hs[i].Key = d.text("Headers.Key")
		hs[i].Value = d.opaque("Headers.Value")
	}
	return hs
}

func (d *decoder) tags(field string) []uint64 {
	off := d.off
	n := uint64(d.u32(field))
	if d.err != nil || n == 0 {
		return nil
	}
	if left := uint64(len(d.body) - d.off); n*8 > left {
		d.fail(field, off, fmt.Sprintf("%d tags cannot fit in the %d bytes left", n, left))
		return nil
	}
	tags := make([]uint64, n)
	for i := range tags {
		tags[i] = d.u64(field)
	}
	return tags
}

// finish reports the first failure, or trailing bytes.
func (d *decoder) finish() error {
	if d.err == nil && d.off != len(d.body) {
		d.fail("", d.off, fmt.Sprintf("%d trailing bytes after the last field, at body byte %d", len(d.body)-d.off, d.off))
	}
	if d.err != nil {
		return d.err
	}
	return nil
}
