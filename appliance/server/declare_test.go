package server

import (
	"strings"
	"testing"

	"github.com/fibril-edge/fibril/appliance/wire"
)

func TestDeclare(t *testing.T) {
	ts := startServer(t, Options{})
	c := connect(t, ts.addr, "")

	d := c.declare(&wire.Declare{Queue: "clicks", Durability: wire.DurabilityBuffered, Partitions: 3})
	if !d.Created || d.Queue != "clicks" || d.Durability != wire.DurabilityBuffered || d.Partitions != 3 ||
		!strings.Contains(d.Warning, "without waiting for fsync") {
		t.Fatalf("first declare: %+v", d)
	}

	// Naming no mode keeps the stored one, with its warning.
	d = c.declare(&wire.Declare{Queue: "clicks", MaxMessages: 10})
	if d.Created || d.Durability != wire.DurabilityBuffered || d.Partitions != 3 || d.Warning == "" {
		t.Fatalf("declare without a mode: %+v", d)
	}
	if info, _ := ts.b.QueueInfo("clicks"); info.Config.MaxMessages != 10 {
		t.Fatalf("MaxMessages %d after re-declare, want 10", info.Config.MaxMessages)
	}

	// A durable queue has no warning.
	if d := c.declare(&wire.Declare{Queue: "orders"}); !d.Created || d.Durability != wire.DurabilityDurable || d.Warning != "" {
		t.Fatalf("durable declare: %+v", d)
	}

	for _, tc := range []struct {
		name string
		d    wire.Declare
		code wire.ErrorCode
	}{
		{"other mode", wire.Declare{Queue: "clicks", Durability: wire.DurabilityDurable}, wire.CodeConflict},
		{"other partition count", wire.Declare{Queue: "clicks", Partitions: 2}, wire.CodeConflict},
		{"bad name", wire.Declare{Queue: "no spaces"}, wire.CodeBadRequest},
		{"empty name", wire.Declare{Queue: ""}, wire.CodeBadRequest},
		{"own dead-letter queue", wire.Declare{Queue: "x", DeadLetter: "x"}, wire.CodeBadRequest},
		{"too many partitions", wire.Declare{Queue: "y", Partitions: 1000}, wire.CodeBadRequest},
		{"limit above int64", wire.Declare{Queue: "z", MaxBytes: 1 << 63}, wire.CodeBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.d.Corr = c.nextCorr()
			c.send(&tc.d)
			c.expectError(tc.d.Corr, tc.code)
		})
	}

	// The errors failed single requests: the connection goes on, and the
	// conflicting declares changed nothing.
	if d := c.declare(&wire.Declare{Queue: "clicks"}); d.Durability != wire.DurabilityBuffered || d.Partitions != 3 {
		t.Fatalf("after the conflicts: %+v", d)
	}
}
