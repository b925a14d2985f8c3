package server

import (
	"strings"
	"testing"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// MaxConnections sessions are served; one more is refused at its Hello
// with an unavailable Error naming the limit, and counted; a closed
// session makes room again.
func TestMaxConnections(t *testing.T) {
	s := startServer(t, Options{MaxConnections: 2})
	first := connect(t, s.addr, "")
	connect(t, s.addr, "")

	extra := dial(t, s.addr)
	extra.send(&wire.Hello{Version: wire.Version, ClientName: t.Name()})
	got := extra.expectClosed()
	if len(got) == 0 {
		t.Fatal("the third connection was closed without an Error")
	}
	e, ok := got[len(got)-1].(*wire.Error)
	if !ok || e.Code != wire.CodeUnavailable || !strings.Contains(e.Message, "at most 2") {
		t.Fatalf("third connection got %#v, want unavailable naming the limit 2", got[len(got)-1])
	}
	if s.Refused() != 1 {
		t.Fatalf("Refused() = %d, want 1", s.Refused())
	}

	first.nc.Close()
	waitFor(t, "the closed session to leave", func() bool { return s.Connections() == 1 })
	c := connect(t, s.addr, "")
	c.declare(&wire.Declare{Corr: c.nextCorr(), Queue: "q"})
}
