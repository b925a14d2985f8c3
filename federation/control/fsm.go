package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/fibril-edge/fibril/appliance"
)

// Op names a command.
type Op string

// The commands the state machine applies.
const (
	OpAddMember    Op = "add_member"
	OpRemoveMember Op = "remove_member"
	OpDeclare      Op = "declare"
	OpDeleteQueue  Op = "delete_queue"
	OpSetSettings  Op = "set_settings"
	OpRecover      Op = "recover"
	OpSeal         Op = "seal"
	OpAdopt        Op = "adopt"
	OpSetMode      Op = "set_mode"
)

// Command is one entry of the control log, JSON-encoded.
type Command struct {
	Op       Op                     `json:"op"`
	Member   *Member                `json:"member,omitempty"`
	ID       string                 `json:"id,omitempty"`
	Queue    *appliance.QueueConfig `json:"queue,omitempty"`
	Policy   Policy                 `json:"policy,omitzero"`
	Warnings []string               `json:"warnings,omitempty"`
	Settings map[string]string      `json:"settings,omitempty"`
	Recover  *Recover               `json:"recover,omitempty"`
	Seal     *SealReport            `json:"seal,omitempty"`
	// Owner is the node that brings an adopted queue along (OpAdopt).
	Owner string `json:"owner,omitempty"`
	// Mode is OpSetMode's argument (mode.go).
	Mode *SetMode `json:"mode,omitempty"`
}

// Result is what applying a command returns to the proposer.
type Result struct {
	Err     error
	Queue   Queue
	Created bool
	// Index is the raft log index the command was applied at: a node
	// whose state has applied it sees the command's outcome.
	Index uint64
}

// FSM is the raft state machine. raft calls Apply, Snapshot and Restore
// from its own goroutines.
//
// The state is copied on write: a published *State is never changed
// again, so readers load it without a lock or a copy. Apply derives the
// next state from the current one (State.derive copies its maps, not the
// entries), changes it, and publishes it; an entry's slices are copied
// only by the command that changes them (State.ownAssignments). A
// thousand queues therefore cost each command a copy of two maps, not of
// every list in them.
type FSM struct {
	mu    sync.Mutex // serialises Apply and Restore
	state atomic.Pointer[State]
	// onChange, when set, is called after each applied command (outside
	// the lock) so the node can wake waiters.
	onChange func()
}

// NewFSM returns an empty state machine.
func NewFSM(onChange func()) *FSM {
	f := &FSM{onChange: onChange}
	f.state.Store(newState())
	return f
}

// State returns a deep copy of the current state, the caller's to change.
func (f *FSM) State() *State { return f.state.Load().clone() }

// Shared returns the current state without copying it: it is never
// changed once published. Callers must not change it either. The loops
// that read the whole state after every applied command use it.
func (f *FSM) Shared() *State { return f.state.Load() }

// Read calls fn with the current state, without a copy: for lookups on
// hot paths (every forwarded publish). fn must not change the state.
func (f *FSM) Read(fn func(*State)) { fn(f.state.Load()) }

// Applied is the raft log index of the last command applied.
func (f *FSM) Applied() uint64 { return f.state.Load().Applied }

// Apply applies one log entry and returns a Result. The entry's index
// becomes the state's Applied, and the incarnation of a queue it creates.
// A command that fails changes nothing but Applied.
func (f *FSM) Apply(l *raft.Log) any {
	var c Command
	derr := json.Unmarshal(l.Data, &c)
	f.mu.Lock()
	cur := f.state.Load()
	var r Result
	if derr != nil {
		r = Result{Err: fmt.Errorf("control: undecodable command at index %d: %w", l.Index, derr)}
	} else {
		next := cur.derive()
		next.Applied = max(cur.Applied, l.Index)
		if r = next.apply(c); r.Err == nil {
			cur = next
		}
	}
	if cur.Applied < l.Index {
		same := *cur // shares the maps: neither state changes them again
		same.Applied = l.Index
		cur = &same
	}
	f.state.Store(cur)
	r.Index = l.Index
	f.mu.Unlock()
	if f.onChange != nil {
		f.onChange()
	}
	return r
}

func (s *State) apply(c Command) Result {
	switch c.Op {
	case OpAddMember:
		if c.Member == nil {
			return Result{Err: errors.New("control: add_member without a member")}
		}
		return Result{Err: s.addMember(*c.Member)}
	case OpRemoveMember:
		return Result{Err: s.removeMember(c.ID)}
	case OpDeclare:
		if c.Queue == nil {
			return Result{Err: errors.New("control: declare without a queue")}
		}
		q, created, err := s.declare(*c.Queue, c.Policy, c.Warnings)
		return Result{Err: err, Queue: q, Created: created}
	case OpAdopt:
		if c.Queue == nil {
			return Result{Err: errors.New("control: adopt without a queue")}
		}
		q, created, err := s.adopt(*c.Queue, c.Owner)
		return Result{Err: err, Queue: q, Created: created}
	case OpDeleteQueue:
		return Result{Err: s.deleteQueue(c.ID)}
	case OpSetMode:
		if c.Mode == nil {
			return Result{Err: errors.New("control: set_mode without its argument")}
		}
		q, err := s.setMode(*c.Mode)
		return Result{Err: err, Queue: q}
	case OpSetSettings:
		return Result{Err: s.setSettings(c.Settings)}
	case OpRecover:
		if c.Recover == nil {
			return Result{Err: errors.New("control: recover without its argument")}
		}
		return Result{Err: s.recover(*c.Recover)}
	case OpSeal:
		if c.Seal == nil {
			return Result{Err: errors.New("control: seal without its report")}
		}
		return Result{Err: s.seal(*c.Seal)}
	}
	return Result{Err: fmt.Errorf("control: unknown command %q", c.Op)}
}

// Snapshot captures the state for raft.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	return snapshot{f.state.Load()}, nil // published states are never changed
}

// Restore replaces the state with a snapshot's.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	s := newState()
	if err := json.NewDecoder(rc).Decode(s); err != nil {
		return fmt.Errorf("control: restore snapshot: %w", err)
	}
	if err := s.check(); err != nil {
		return fmt.Errorf("control: restore snapshot: %w", err)
	}
	f.mu.Lock()
	f.state.Store(s)
	f.mu.Unlock()
	if f.onChange != nil {
		f.onChange()
	}
	return nil
}

type snapshot struct{ s *State }

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode(s.s); err != nil {
		sink.Cancel()
		return fmt.Errorf("control: persist snapshot: %w", err)
	}
	return sink.Close()
}

func (snapshot) Release() {}
