package replication

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// ErrStopped is returned by Gate.Wait when its stop channel closes.
var ErrStopped = errors.New("replication: gate stopped")

// Boundary says which follower position a gate counts.
type Boundary uint8

const (
	// Written counts records handed to the follower's operating system
	// (replica_buffered).
	Written Boundary = 1
	// Durable counts records the follower has synced (replica_durable,
	// majority_durable).
	Durable Boundary = 2
)

func (b Boundary) String() string {
	if b == Written {
		return "written"
	}
	return "durable"
}

// Gate holds a partition's confirms and deliveries until enough copies
// have its records. The owner's own copy is counted by the caller, which
// waits for its local append first; the gate counts followers: it opens
// up to the (required-1)-th highest follower position at its boundary.
// A lock guards the positions; waiters sleep on a channel closed at every
// change.
type Gate struct {
	boundary Boundary

	mu        sync.Mutex
	required  int // copies, owner included
	followers map[string]Position
	heard     map[string]time.Time // a follower's last report, or when it joined the gate
	changed   chan struct{}
}

// NewGate returns a gate for a partition whose followers are named; the
// policy needs required copies (owner included) at boundary.
func NewGate(boundary Boundary, required int, followers []string) *Gate {
	g := &Gate{boundary: boundary, required: required, followers: map[string]Position{},
		heard: map[string]time.Time{}, changed: make(chan struct{})}
	now := time.Now()
	for _, f := range followers {
		g.followers[f], g.heard[f] = Position{}, now
	}
	return g
}

// SetBoundary makes the gate count copies at boundary from now on (the
// queue's mode changed, fenced). Waiters are woken to recheck.
func (g *Gate) SetBoundary(boundary Boundary) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.boundary = boundary
	close(g.changed)
	g.changed = make(chan struct{})
}

// Changed is closed at the gate's next change (a follower's progress, its
// followers, its boundary).
func (g *Gate) Changed() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.changed
}

// SetFollowers makes followers the gate's followers and required its
// count, as the partition's assignment changes: a new follower starts at
// position 0, a kept one keeps its position, one left out is forgotten.
// Waiters are woken to recheck against the new count.
func (g *Gate) SetFollowers(followers []string, required int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	next := make(map[string]Position, len(followers))
	heard := make(map[string]time.Time, len(followers))
	now := time.Now()
	for _, f := range followers {
		next[f], heard[f] = g.followers[f], now
		if at, ok := g.heard[f]; ok {
			heard[f] = at
		}
	}
	g.followers, g.heard, g.required = next, heard, required
	close(g.changed)
	g.changed = make(chan struct{})
}

// Update records a follower's progress. Positions never move back: a
// report lower than the last (an old frame, a reconnect) is ignored field
// by field.
func (g *Gate) Update(follower string, p Position) {
	g.mu.Lock()
	defer g.mu.Unlock()
	cur, ok := g.followers[follower]
	if !ok {
		return
	}
	g.heard[follower] = time.Now()
	p.Written, p.Durable = max(p.Written, cur.Written), max(p.Durable, cur.Durable)
	if p == cur {
		return
	}
	g.followers[follower] = p
	close(g.changed)
	g.changed = make(chan struct{})
}

// Ceiling is the follower part of the visibility ceiling: the highest next
// offset that required-1 followers have reached at the gate's boundary
// (unbounded when the owner alone suffices).
func (g *Gate) Ceiling() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ceilingLocked()
}

func (g *Gate) ceilingLocked() uint64 { return g.ceilingAtLocked(g.boundary) }

// ceilingAtLocked is the ceiling counting copies at boundary.
func (g *Gate) ceilingAtLocked(boundary Boundary) uint64 {
	need := g.required - 1
	if need <= 0 {
		return ^uint64(0)
	}
	if need > len(g.followers) {
		return 0
	}
	pos := make([]uint64, 0, len(g.followers))
	for _, p := range g.followers {
		if boundary == Written {
			pos = append(pos, p.Written)
		} else {
			pos = append(pos, p.Durable)
		}
	}
	slices.Sort(pos)
	return pos[len(pos)-need]
}

// Wait blocks until the ceiling reaches next, or stop closes.
func (g *Gate) Wait(stop <-chan struct{}, next uint64) error {
	return g.WaitFor(WaitOptions{Stop: stop}, next)
}

// WaitOptions say what else ends a WaitFor, and what it counts.
type WaitOptions struct {
	Stop   <-chan struct{} // closed: ErrStopped
	Fenced <-chan struct{} // closed: ErrFenced, checked before the ceiling
	// Durable counts durable positions whatever the gate's boundary: for
	// a record appended under the durable rule, whose confirm promises
	// that though the queue changed to buffered while it waited.
	Durable bool
}

// ErrFenced: the owner was fenced (a newer epoch) before the ceiling
// reached the record; it confirms nothing more.
var ErrFenced = errors.New("replication: the owner was fenced")

// WaitFor is Wait with o's other ends and count.
func (g *Gate) WaitFor(o WaitOptions, next uint64) error {
	for {
		select {
		case <-o.Fenced:
			return ErrFenced
		default:
		}
		g.mu.Lock()
		b := g.boundary
		if o.Durable {
			b = Durable
		}
		if g.ceilingAtLocked(b) >= next {
			g.mu.Unlock()
			return nil
		}
		ch := g.changed
		g.mu.Unlock()
		select {
		case <-ch:
		case <-o.Stop:
			return ErrStopped
		case <-o.Fenced:
			return ErrFenced
		}
	}
}

// Floor is the lowest durable position over the followers: retention must
// keep every record from it on. Written progress never counts here. A
// follower not heard from for longer than hold (its node down, its stream
// stuck) no longer holds retention back, so an owner's disk use stays
// bounded while a follower is gone; its copy is rebuilt from the owner's
// head when it returns (Follower.startAtHead). hold <= 0 holds for every
// follower however long.
func (g *Gate) Floor(hold time.Duration) uint64 {
	return g.FloorAt(hold, time.Now())
}

// FloorAt is Floor as of now.
func (g *Gate) FloorAt(hold time.Duration, now time.Time) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	floor := ^uint64(0)
	for f, p := range g.followers {
		if hold > 0 && now.Sub(g.heard[f]) > hold {
			continue
		}
		floor = min(floor, p.Durable)
	}
	return floor
}

// Positions is a copy of every follower's last reported position.
func (g *Gate) Positions() map[string]Position {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]Position, len(g.followers))
	for k, v := range g.followers {
		out[k] = v
	}
	return out
}

// Pending describes what a waiting confirm needs, for error messages.
func (g *Gate) Pending(next uint64) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	have := 0
	for _, p := range g.followers {
		at := p.Durable
		if g.boundary == Written {
			at = p.Written
		}
		if at >= next {
			have++
		}
	}
	return fmt.Sprintf("%s on %d of %d copies, the policy needs %d", g.boundary, have+1, len(g.followers)+1, g.required)
}
