package bridge

import (
	"testing"

	"github.com/fibril-edge/fibril/internal/leakcheck"
)

// TestMain fails the package's tests if they leave a bridge, broker or
// client goroutine running.
func TestMain(m *testing.M) { leakcheck.Main(m) }
