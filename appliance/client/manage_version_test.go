package client

import (
	"errors"
	"strings"
	"testing"
	"time"

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

// Against a version 4 broker InProgress and NackDelay fail with
// ErrInvalid before anything is sent, and leave the delivery unsettled:
// an Ack afterwards goes through. A NackDelay of zero is a Requeue, which
// version 4 has.
func TestSettleVerbsNeedVersion5(t *testing.T) {
	s := newFake(t, func(s *fakeServer) { s.version = 4 })
	c := dial(t, s, Options{})
	declare(t, c, Queue("q"))
	publishN(t, c, "q", 2)
	cons, err := c.Consume(testCtx(t), "q", 2)
	if err != nil {
		t.Fatal(err)
	}
	d := receive(t, cons)
	for name, err := range map[string]error{"InProgress": d.InProgress(), "NackDelay": d.NackDelay(time.Second)} {
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "protocol version 4") {
			t.Errorf("%s against a version 4 broker: %v", name, err)
		}
	}
	if err := d.Ack(); err != nil {
		t.Fatalf("Ack after the refused verbs: %v", err)
	}
	if err := receive(t, cons).NackDelay(0); err != nil {
		t.Fatalf("NackDelay(0): %v", err)
	}
	s.waitFor("the ack and the nack", func() bool {
		return s.countLocked(wire.TypeAck) == 1 && s.countLocked(wire.TypeNack) == 1
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.received {
		if n, ok := f.(*wire.Nack); ok && n.DelayMillis != 0 {
			t.Errorf("sent a delay to a version 4 broker: %+v", n)
		}
		if f.Type() == wire.TypeExtend {
			t.Errorf("sent %s to a version 4 broker", f.Type())
		}
	}
}
