package control

import (
	"errors"
	"slices"
	"testing"

	"github.com/fibril-edge/fibril/appliance"
)

// A mode change is asked for, then put in effect; asking again is
// harmless, asking for another while one is pending is refused, and a
// late proposal to put a change in effect that is not pending is a
// conflict unless it is in effect already. The buffered warning follows
// the mode.
func TestSetModeRules(t *testing.T) {
	s := threeMembers(t)
	if _, _, err := s.declare(appliance.QueueConfig{Name: "q", Durability: appliance.Buffered}, Policy{}, []string{appliance.BufferedWarning}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.setMode(SetMode{Queue: "nope", To: appliance.Durable}); !errors.Is(err, ErrUnknownQueue) {
		t.Fatalf("unknown queue: %v", err)
	}
	if _, err := s.setMode(SetMode{Queue: "q", To: appliance.Durable, Applied: true}); !errors.Is(err, appliance.ErrConflict) {
		t.Fatalf("putting in effect a change nobody asked for: %v", err)
	}
	q, err := s.setMode(SetMode{Queue: "q", To: appliance.Durable, Since: 7})
	if err != nil || q.ModeChange == nil || q.ModeChange.To != appliance.Durable || q.Config.Durability != appliance.Buffered {
		t.Fatalf("ask: %+v, %v", q, err)
	}
	if q, err := s.setMode(SetMode{Queue: "q", To: appliance.Durable, Since: 9}); err != nil || q.ModeChange.Since != 7 {
		t.Fatalf("asking again changed the pending change: %+v, %v", q.ModeChange, err)
	}
	if _, err := s.setMode(SetMode{Queue: "q", To: appliance.Buffered}); !errors.Is(err, appliance.ErrModeChangePending) {
		t.Fatalf("another change while one is pending: %v", err)
	}
	q, err = s.setMode(SetMode{Queue: "q", To: appliance.Durable, Applied: true})
	if err != nil || q.ModeChange != nil || q.Config.Durability != appliance.Durable || slices.Contains(q.Warnings, appliance.BufferedWarning) {
		t.Fatalf("put in effect: %+v, %v", q, err)
	}
	if _, err := s.setMode(SetMode{Queue: "q", To: appliance.Durable, Applied: true}); err != nil {
		t.Fatalf("a retried proposal of the change in effect: %v", err)
	}
	if q, err := s.setMode(SetMode{Queue: "q", To: appliance.Durable}); err != nil || q.ModeChange != nil {
		t.Fatalf("asking for the mode in effect: %+v, %v", q.ModeChange, err)
	}
	if _, err := s.setMode(SetMode{Queue: "q", To: appliance.Buffered}); err != nil {
		t.Fatal(err)
	}
	q, err = s.setMode(SetMode{Queue: "q", To: appliance.Buffered, Applied: true})
	if err != nil || q.Config.Durability != appliance.Buffered || !slices.Contains(q.Warnings, appliance.BufferedWarning) {
		t.Fatalf("back to buffered: %+v, %v", q, err)
	}
	if c := s.clone(); c.Queues["q"].ModeChange != nil {
		t.Fatal("a clone has a change the state has not")
	}
}
