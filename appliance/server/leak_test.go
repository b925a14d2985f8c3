package server

import (
	"testing"

	"github.com/fibril-edge/fibril/internal/leakcheck"
)

// TestMain checks that every goroutine the tests started (servers,
// connections, writers, drains, lingers, brokers) has ended once they are
// done.
func TestMain(m *testing.M) { leakcheck.Main(m) }
