package client

import (
	"errors"
	"strings"
	"testing"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// A broker that speaks only protocol version 4 has no queue management
// requests: each call fails with ErrInvalid, saying so, before anything
// is sent, and the connection stays usable.
func TestQueueManagementNeedsVersion5(t *testing.T) {
	s := newFake(t, func(s *fakeServer) { s.version = 4 })
	c := dial(t, s, Options{})
	ctx := testCtx(t)
	declare(t, c, Queue("q"))
	_, infoErr := c.QueueInfo(ctx, "q")
	_, purgeErr := c.PurgeQueue(ctx, "q")
	for _, err := range []error{infoErr, purgeErr, c.DeleteQueue(ctx, "q", IfEmpty())} {
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "protocol version 4") ||
			!strings.Contains(err.Error(), "version 5 can") {
			t.Errorf("against a version 4 broker: %v", err)
		}
	}
	s.mu.Lock()
	for _, f := range s.received {
		switch f.Type() {
		case wire.TypeQueueInfo, wire.TypePurgeQueue, wire.TypeDeleteQueue:
			t.Errorf("sent %s to a version 4 broker", f.Type())
		}
	}
	s.mu.Unlock()
	declare(t, c, Queue("q")) // the connection is still there
}
