package server

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain checks that every goroutine the tests started (servers,
// connections, writers, drains, lingers, brokers) has ended once they are
// done.
func TestMain(m *testing.M) {
	before := runtime.NumGoroutine()
	code := m.Run()
	if code == 0 {
		if leaked := waitGoroutines(before, 10*time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines still running after the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// waitGoroutines waits for the goroutine count to fall back to n and
// returns the stacks of the extra ones if it does not within limit.
func waitGoroutines(n int, limit time.Duration) string {
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
