package daemon

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Size is a byte count written with a unit in the config: "64MiB", "4 KiB",
// "1GB", or plain bytes ("1048576", or a TOML integer).
type Size int64

var sizeUnits = []struct {
	name string
	mult int64
}{
	// Longest names first, so "KiB" is not read as "B".
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"B", 1},
}

// ParseSize reads a size.
func ParseSize(s string) (Size, error) {
	text := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if len(text) > len(u.name) && strings.EqualFold(text[len(text)-len(u.name):], u.name) {
			text, mult = strings.TrimSpace(text[:len(text)-len(u.name)]), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(text, "_", ""), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size %q: want a non-negative whole number with an optional unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return Size(n * mult), nil
}

func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalText writes the size in the largest binary unit that divides it.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

func (s Size) String() string {
	if s == 0 {
		return "0"
	}
	for _, u := range []struct {
		name string
		mult int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if int64(s)%u.mult == 0 {
			return strconv.FormatInt(int64(s)/u.mult, 10) + u.name
		}
	}
	return strconv.FormatInt(int64(s), 10) + "B"
}

// Duration is a Go duration string in the config: "10s", "500ms".
type Duration time.Duration

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("duration %q: want a Go duration such as 10s or 500ms", b)
	}
	*d = Duration(v)
	return nil
}

func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func (d Duration) String() string { return time.Duration(d).String() }
