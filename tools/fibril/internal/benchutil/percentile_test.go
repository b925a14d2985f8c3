package benchutil

import (
	"testing"
	"time"
)

func seq(n int) []time.Duration {
	s := make([]time.Duration, n)
	for i := range s {
		s[i] = time.Duration(i + 1) // 1..n
	}
	return s
}

func TestPercentileNearestRank(t *testing.T) {
	tests := []struct {
		n    int
		p    float64
		want time.Duration
	}{
		{n: 1, p: 0.5, want: 1},
		{n: 1, p: 0.999, want: 1},
		{n: 2, p: 0.5, want: 1},  // ceil(1.0)-1 = 0
		{n: 3, p: 0.5, want: 2},  // ceil(1.5)-1 = 1
		{n: 10, p: 0.5, want: 5}, // ceil(5)-1 = 4
		{n: 10, p: 0.99, want: 10},
		{n: 100, p: 0.99, want: 99}, // 0.99*100 must not round up to 100
		{n: 100, p: 0.999, want: 100},
		{n: 1000, p: 0.999, want: 999},
		{n: 1000, p: 1, want: 1000},
		{n: 8000, p: 0.5, want: 4000},
		{n: 8000, p: 0.99, want: 7920},
		{n: 8000, p: 0.999, want: 7992},
		{n: 5, p: 0, want: 1},
	}
	for _, tt := range tests {
		if got := Percentile(seq(tt.n), tt.p); got != tt.want {
			t.Errorf("Percentile(1..%d, %v) = %d, want %d", tt.n, tt.p, got, tt.want)
		}
	}
	if got := Percentile(nil, 0.5); got != 0 {
		t.Errorf("Percentile(nil) = %d, want 0", got)
	}
}

func TestSummarizeSortsInPlace(t *testing.T) {
	s := []time.Duration{5, 3, 1, 4, 2}
	l := Summarize(s)
	if l.N != 5 || l.P50 != 3 || l.P99 != 5 || l.P999 != 5 {
		t.Errorf("Summarize = %+v, want N=5 P50=3 P99=5 P999=5", l)
	}
	if s[0] != 1 || s[4] != 5 {
		t.Errorf("samples not sorted: %v", s)
	}
}

func TestParseByteSize(t *testing.T) {
	tests := map[string]ByteSize{
		"4096": 4096, "4MiB": 4 << 20, "1GiB": 1 << 30, "1.5GiB": 3 << 29,
		"64K": 64 << 10, "2 M": 2 << 20, "10B": 10,
	}
	for in, want := range tests {
		got, err := ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "MiB", "-1", "4TiB", "x"} {
		if _, err := ParseByteSize(bad); err == nil {
			t.Errorf("ParseByteSize(%q) succeeded, want error", bad)
		}
	}
}
