package wire

import (
	"fmt"
	"math"
	"unicode/utf8"
)

// validator checks a frame before it is encoded. The first failure sticks.
type validator struct {
	typ FrameType
	err *FrameError
}

func (v *validator) fail(field, reason string) {
	if v.err == nil {
		v.err = malformed(v.typ, field, -1, reason)
	}
}

func (v *validator) str(field, s string, text bool) {
	if len(s) > MaxStringLen {
		v.fail(field, fmt.Sprintf("%d bytes exceeds the limit of %d", len(s), MaxStringLen))
	} else if text && !utf8.ValidString(s) {
		v.fail(field, "text is not valid UTF-8")
	}
}

func (v *validator) text(field, s string)   { v.str(field, s, true) }
func (v *validator) opaque(field, s string) { v.str(field, s, false) }

func (v *validator) bytes(field string, p []byte) {
	if uint64(len(p)) > math.MaxUint32 {
		v.fail(field, fmt.Sprintf("%d bytes exceeds the limit of %d", len(p), uint64(math.MaxUint32)))
	}
}

func (v *validator) headers(hs []Header) {
	const field = "Headers"
	if len(hs) > MaxHeaders {
		v.fail(field, fmt.Sprintf("%d headers exceeds the limit of %d", len(hs), MaxHeaders))
		return
	}
	for _, h := range hs {
		v.text("Headers.Key", h.Key)
		v.opaque("Headers.Value", h.Value)
	}
}

func (v *validator) tags(field string, tags []uint64) {
	if uint64(len(tags)) > math.MaxUint32 {
		v.fail(field, fmt.Sprintf("%d tags exceeds the limit of %d", len(tags), uint64(math.MaxUint32)))
	}
}

// checkf fails field unless ok, with the reason formatted only then:
// Validate runs on every frame written, so its success path formats nothing.
func (v *validator) checkf(field string, ok bool, format string, args ...any) {
	if !ok {
		v.fail(field, fmt.Sprintf(format, args...))
	}
}

func (v *validator) result() error {
	if v.err != nil {
		return v.err
	}
	return nil
}
