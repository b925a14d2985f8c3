package main

import (
	"strings"
	"testing"

	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/internal/brokertest"
)

// --server (and FIBRIL_SERVER) takes a comma-separated list, tried in
// turn: pub and sub skip a dead first node, and a list of dead nodes is
// reported with each address and its error.
func TestServerList(t *testing.T) {
	_, addr := brokertest.Start(t)
	declareOverWire(t, addr, client.Queue("orders").Buffered())
	dead, dead2 := closedPort(t), closedPort(t)

	runCLI("pub", "orders", "one", "--server", dead+","+addr).want(t, 0, "partition=0 offset=0\n", "")
	t.Setenv(envServer, dead+", "+addr)
	runCLI("pub", "orders", "two").want(t, 0, "partition=0 offset=1\n", "")
	runCLI("sub", "orders", "--max", "2").want(t, 0, "offset=0\tone\npartition=0 offset=1\ttwo\n", "")

	r := runCLI("pub", "orders", "x", "--server", dead+","+dead2)
	r.want(t, 1, "", "cannot reach fibrild at any of "+dead+","+dead2+": is it running?")
	for _, a := range []string{dead, dead2} {
		if !strings.Contains(r.stderr, "dial "+a+": ") {
			t.Errorf("stderr %q does not name %s with its error", r.stderr, a)
		}
	}
	runCLI("sub", "orders", "--server", dead+",,"+addr).want(t, 1, "", "an empty entry")
}
