//go:build !unix

package admin

// residentBytes is not measured off Unix.
func residentBytes() (int64, bool) { return 0, false }

// cpuSeconds is not measured off Unix.
func cpuSeconds() (float64, bool) { return 0, false }
