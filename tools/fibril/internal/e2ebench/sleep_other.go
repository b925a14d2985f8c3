//go:build !linux

package e2ebench

import "time"

// sleepPrecisely is time.Sleep outside Linux.
func sleepPrecisely(d time.Duration) { time.Sleep(d) }
