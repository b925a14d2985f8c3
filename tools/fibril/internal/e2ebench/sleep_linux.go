package e2ebench

import (
	"time"

	"golang.org/x/sys/unix"
)

// sleepPrecisely blocks the calling OS thread for d with nanosleep(2).
// time.Sleep wakes through the runtime's network poller, whose waits are
// whole milliseconds, so a goroutine due in 300 µs wakes up to a
// millisecond late; a thread in nanosleep wakes within the kernel's timer
// slack (50 µs by default). Callers lock their goroutine to its thread.
func sleepPrecisely(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	for unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
}
