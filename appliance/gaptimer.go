package appliance

import (
	"sync/atomic"
	"time"
)

// gapTimer calls f once d has passed, unless Stop comes first. The quiet
// gap that ends a buffered publish batch is 100 µs by default, and the Go
// runtime's timers wake in whole milliseconds when the process is
// otherwise idle, which stretched every gap to a millisecond or more. So
// the gap is slept on its own goroutine with a precise sleep (nanosleep on
// Linux: see sleepPrecise).
type gapTimer struct {
	state atomic.Int32  // 0 pending, 1 fired, 2 stopped
	done  chan struct{} // closed when the sleeping goroutine ends (tests wait on it)
}

func afterGap(d time.Duration, f func()) *gapTimer {
	t := &gapTimer{done: make(chan struct{})}
	go func() {
		defer close(t.done)
		sleepPrecise(d)
		if t.state.CompareAndSwap(0, 1) {
			f()
		}
	}()
	return t
}

// Stop prevents the call and reports whether it did (false: f has run or
// is running).
func (t *gapTimer) Stop() bool { return t.state.CompareAndSwap(0, 2) }
