// Package leakcheck fails a test binary whose tests left goroutines of
// this project running. Use it from TestMain:
//
//	func TestMain(m *testing.M) { leakcheck.Main(m) }
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Limit is how long the goroutines may take to end after the tests.
const Limit = 10 * time.Second

// Main runs the tests, then waits for the goroutine count to fall back to
// what it was before them, and exits non-zero with the extra goroutines'
// stacks if it does not.
func Main(m *testing.M) {
	before := runtime.NumGoroutine()
	code := m.Run()
	if code == 0 {
		if leaked := wait(before, Limit); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines still running after the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// wait polls the goroutine count (the runtime offers no event for a
// goroutine's end) and returns the stacks of this project's extra
// goroutines if the count stays above n past limit.
func wait(n int, limit time.Duration) string {
	deadline := time.Now().Add(limit)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			var ours []string
			for _, g := range strings.Split(string(buf), "\n\n") {
				if strings.Contains(g, "fibril") && !strings.Contains(g, "TestMain") {
					ours = append(ours, g)
				}
			}
			return strings.Join(ours, "\n\n")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return ""
}
