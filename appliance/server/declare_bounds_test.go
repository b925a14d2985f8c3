package server

import (
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// A version 3 Declare carries the dedupe table's bounds to the queue; a
// broker refuses bounds out of range as it would from the admin API.
func TestDeclareCarriesDedupeBounds(t *testing.T) {
	ts := startServer(t, Options{Logger: testLogger()})
	c := connect(t, ts.addr, "")
	c.declare(&wire.Declare{Queue: "ids", DedupeWindowMillis: uint32(time.Minute.Milliseconds()),
		DedupeMaxEntries: 500, DedupeMaxBytes: 2 << 20})
	in, err := ts.b.QueueInfo("ids")
	if err != nil {
		t.Fatal(err)
	}
	if in.Config.DedupeMaxEntries != 500 || in.Config.DedupeMaxBytes != 2<<20 {
		t.Fatalf("declared bounds 500 entries, 2 MiB; the queue has %d, %d", in.Config.DedupeMaxEntries, in.Config.DedupeMaxBytes)
	}
}
