package appliance

import (
	"testing"

	"github.com/fibril-edge/fibril/internal/leakcheck"
)

// TestMain checks that every goroutine the tests started (partition
// appliers and dispatchers, log writers, timers, dead-letter copies) has
// ended once they are done.
func TestMain(m *testing.M) { leakcheck.Main(m) }
