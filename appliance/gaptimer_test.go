package appliance

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestGapTimer(t *testing.T) {
	fired := make(chan struct{})
	start := time.Now()
	tm := afterGap(100*time.Microsecond, func() { close(fired) })
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("gap timer never fired")
	}
	if time.Since(start) < 100*time.Microsecond {
		t.Fatal("gap timer fired before its gap")
	}
	if tm.Stop() {
		t.Fatal("Stop after the call reported it prevented it")
	}
	var calls atomic.Int32
	stopped := afterGap(20*time.Millisecond, func() { calls.Add(1) })
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop of a pending timer: want true once, then false")
	}
	<-stopped.done // the gap has passed: a broken Stop would have called by now
	if calls.Load() != 0 {
		t.Fatal("a stopped timer called its function")
	}
}

// BenchmarkGapTimer is how long a 100 µs gap really takes: the runtime's
// timers rounded it up to a millisecond or more on an idle process.
func BenchmarkGapTimer(b *testing.B) {
	for b.Loop() {
		done := make(chan struct{})
		afterGap(100*time.Microsecond, func() { close(done) })
		<-done
	}
}

func BenchmarkRuntimeTimer100us(b *testing.B) {
	for b.Loop() {
		done := make(chan struct{})
		time.AfterFunc(100*time.Microsecond, func() { close(done) })
		<-done
	}
}
