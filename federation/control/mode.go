package control

import (
	"fmt"
	"slices"

	"github.com/fibril-edge/fibril/appliance"
)

// Mode changes in a cluster. A queue's mode is what its confirms promise,
// so the control state carries two things: the mode in effect (the
// queue's Config.Durability, which every owner opens the queue with and
// every recovery judges its copies by), and a change asked for and not
// yet in effect (Queue.ModeChange). A change is two commands:
//
//   - OpSetMode without Applied records the change asked for. The owner
//     of the queue acts on it (federation/mode.go); a new owner after a
//     failover finds it and acts on it again, so a change never ends half
//     done: it is in effect, or still pending.
//   - OpSetMode with Applied puts it in effect. For a change to durable
//     the owner proposes it only once every required copy holds, durable,
//     everything written before its fence; for a change to buffered it
//     proposes it first, and only then admits publishes under the weaker
//     rule.

// ModeChange is a mode change asked for and not in effect yet.
type ModeChange struct {
	To    appliance.Durability `json:"to"`
	Since int64                `json:"since"` // Unix nanoseconds, the proposer's clock
}

// SetMode is OpSetMode's argument.
type SetMode struct {
	Queue string               `json:"queue"`
	To    appliance.Durability `json:"to"`
	Since int64                `json:"since,omitempty"`
	// Applied puts the change in effect; without it the change is only
	// asked for.
	Applied bool `json:"applied,omitempty"`
}

// setMode applies OpSetMode. Asking for the mode in effect with nothing
// pending, or for the change already pending, changes nothing; asking for
// another while one is pending is appliance.ErrModeChangePending. Putting
// in effect a change that is not the pending one is a conflict too (a
// late proposal after the queue moved on).
func (s *State) setMode(m SetMode) (Queue, error) {
	q, ok := s.Queues[m.Queue]
	if !ok {
		return Queue{}, fmt.Errorf("%w: %s", ErrUnknownQueue, m.Queue)
	}
	if m.To != appliance.Durable && m.To != appliance.Buffered {
		return q, fmt.Errorf("%w: mode must be durable or buffered", appliance.ErrInvalid)
	}
	pending := q.ModeChange
	switch {
	case m.Applied && (pending == nil || pending.To != m.To):
		if q.Config.Durability == m.To {
			return q, nil // applied already: a retried proposal
		}
		return q, fmt.Errorf("%w: queue %s has no change to %s pending", appliance.ErrConflict, m.Queue, m.To)
	case m.Applied:
		q.Config.Durability = m.To
		q.ModeChange = nil
		q.Warnings = slices.DeleteFunc(slices.Clone(q.Warnings), func(w string) bool { return w == appliance.BufferedWarning })
		if m.To == appliance.Buffered {
			q.Warnings = append(q.Warnings, appliance.BufferedWarning)
		}
	case pending != nil && pending.To != m.To:
		return q, fmt.Errorf("%w: queue %s is changing to %s", appliance.ErrModeChangePending, m.Queue, pending.To)
	case pending != nil || q.Config.Durability == m.To:
		return q, nil
	default:
		q.ModeChange = &ModeChange{To: m.To, Since: m.Since}
	}
	s.Queues[m.Queue] = q
	return q, nil
}
