package appliance

import (
	"time"

	"golang.org/x/sys/unix"
)

// sleepPrecise sleeps d with nanosleep, which the kernel ends within tens
// of microseconds, blocking this goroutine's thread for the (short) gap.
func sleepPrecise(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	for unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
}
