//go:build !linux

package appliance

import "time"

// sleepPrecise is time.Sleep where no precise sleep is wired in.
func sleepPrecise(d time.Duration) { time.Sleep(d) }
