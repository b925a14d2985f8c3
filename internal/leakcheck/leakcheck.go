// Package leakcheck fails a test binary whose tests left goroutines of
// this project running. Use it from TestMain:
//
//	func TestMain(m *testing.M) { leakcheck.Main(m) }
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// Limit is how long the goroutines may take to end after the tests.
const Limit = 10 * time.Second

// Main runs the tests, then waits for the goroutine count to fall back to
// what it was before them, and exits non-zero with the extra goroutines'
// stacks if it does not. A goroutine whose stack contains one of except
// is not counted as this project's: for waits a dependency is known to
// leave behind (each use says which and why).
func Main(m *testing.M, except ...string) {
	before := runtime.NumGoroutine()
	code := m.Run()
	if code == 0 {
		if leaked := wait(before, Limit, except); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines still running after the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// wait polls the goroutine count (the runtime offers no event for a
// goroutine's end) and returns the stacks of this project's extra
// goroutines if the count stays above n past limit. It returns early
// once none of the extra goroutines is this project's.
func wait(n int, limit time.Duration, except []string) string {
	deadline := time.Now().Add(limit)
	for runtime.NumGoroutine() > n {
		leaked := ours(except)
		if leaked == "" || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(10 * time.Millisecond)
	}
	return ""
}

// ours is the stacks of this project's goroutines, but for the one
// running TestMain and those matching except.
func ours(except []string) string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "fibril") || strings.Contains(g, "TestMain") {
			continue
		}
		if slices.ContainsFunc(except, func(e string) bool { return strings.Contains(g, e) }) {
			continue
		}
		out = append(out, g)
	}
	return strings.Join(out, "\n\n")
}
