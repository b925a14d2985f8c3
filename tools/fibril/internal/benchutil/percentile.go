// Package benchutil holds the small helpers shared by fibril's benchmarks:
// nearest-rank percentiles, JSON-line output, a description of the machine
// the numbers came from, and a byte-size flag type.
package benchutil

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the nearest-rank p-th percentile (0 < p <= 1) of
// sorted, which must be in ascending order: the value at index
// ceil(p*n)-1. It returns 0 for an empty slice. p <= 0 yields the minimum.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// Multiplying first keeps results such as 0.99*100 from landing a
	// hair above the integer and rounding up one rank too far.
	rank := int(math.Ceil(roundTiny(p * float64(n))))
	idx := min(max(rank-1, 0), n-1)
	return sorted[idx]
}

// roundTiny snaps x to the nearest integer when it is within floating-point
// noise of it, so ceil(0.999*1000) is 999 and not 1000.
func roundTiny(x float64) float64 {
	if r := math.Round(x); math.Abs(x-r) < 1e-9 {
		return r
	}
	return x
}

// Latencies summarises a set of latency samples.
type Latencies struct {
	N    int
	P50  time.Duration
	P99  time.Duration
	P999 time.Duration
}

// Summarize sorts samples in place and returns their p50, p99 and p99.9.
func Summarize(samples []time.Duration) Latencies {
	slices.Sort(samples)
	return Latencies{
		N:    len(samples),
		P50:  Percentile(samples, 0.50),
		P99:  Percentile(samples, 0.99),
		P999: Percentile(samples, 0.999),
	}
}

// Micros converts d to microseconds with nanosecond resolution.
func Micros(d time.Duration) float64 {
	return float64(d.Nanoseconds()) / 1e3
}

// PerSecond returns count/elapsed, rounded to one decimal, or 0 when
// elapsed is not positive.
func PerSecond(count int, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return math.Round(float64(count)/elapsed.Seconds()*10) / 10
}
