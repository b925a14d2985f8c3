// Package await is the one polling wait the tests share, for conditions that
// another goroutine makes true with no event to wait on (counters applied
// after a log append, a connection count): check at every tick, give up when
// ctx ends, and say what was awaited.
package await

import (
	"context"
	"testing"
	"time"
)

// Tick is how often the condition is checked.
const Tick = time.Millisecond

// Until checks cond at every tick until it holds, and fails the test when
// ctx ends first.
func Until(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(Tick)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}

// Within is Until with a deadline of limit from now.
func Within(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	Until(t, ctx, what, cond)
}
