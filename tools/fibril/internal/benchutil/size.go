package benchutil

import (
	"fmt"
	"strconv"
	"strings"
)

// ByteSize is a pflag.Value for byte counts written as a plain number or
// with a binary suffix: 4096, 64KiB, 4MiB, 1GiB, 1.5GiB. K, M and G are
// accepted as shorthand for KiB, MiB and GiB.
type ByteSize int64

var sizeUnits = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30},
	{"B", 1},
}

// ParseByteSize parses s as described on ByteSize.
func ParseByteSize(s string) (ByteSize, error) {
	num, mult := strings.TrimSpace(s), 1.0
	for _, u := range sizeUnits {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("invalid size %q (want e.g. 4096, 4MiB, 1.5GiB)", s)
	}
	return ByteSize(f * mult), nil
}

func (b *ByteSize) String() string {
	v := int64(*b)
	switch {
	case v >= 1<<30 && v%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", v>>30)
	case v >= 1<<20 && v%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", v>>20)
	case v >= 1<<10 && v%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", v>>10)
	}
	return strconv.FormatInt(v, 10)
}

// Set implements pflag.Value.
func (b *ByteSize) Set(s string) error {
	v, err := ParseByteSize(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// Type implements pflag.Value.
func (b *ByteSize) Type() string { return "size" }
