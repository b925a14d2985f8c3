package replication

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// A partition whose assignment gains a follower: the gate counts it from
// position 0, keeps the others' positions, holds retention at the new
// follower's 0, and applies the new required count.
func TestGateSetFollowersAddsAtZero(t *testing.T) {
	g := NewGate(Durable, 2, []string{"a"})
	g.Update("a", Position{Written: 12, Durable: 10})
	g.SetFollowers([]string{"a", "b"}, 2)
	if p := g.Positions(); len(p) != 2 || p["a"] != (Position{Written: 12, Durable: 10}) || p["b"] != (Position{}) {
		t.Fatalf("positions after adding b: %v", p)
	}
	if c, f := g.Ceiling(), g.Floor(0); c != 10 || f != 0 {
		t.Fatalf("ceiling %d floor %d, want 10 (a alone suffices) and 0 (b holds retention)", c, f)
	}
	if s := g.Pending(11); s != "durable on 1 of 3 copies, the policy needs 2" {
		t.Fatalf("Pending = %q", s)
	}
	// The count rises with the copies (majority_durable on 3 → 2, then a
	// replica_durable:3 would need 3).
	g.SetFollowers([]string{"a", "b"}, 3)
	if c := g.Ceiling(); c != 0 {
		t.Fatalf("ceiling %d with b at 0 and 3 copies required", c)
	}
	g.Update("b", Position{Written: 8, Durable: 6})
	if c, f := g.Ceiling(), g.Floor(0); c != 6 || f != 6 {
		t.Fatalf("ceiling %d floor %d, want 6 and 6", c, f)
	}
	// A follower left out is forgotten; its reports are ignored.
	g.SetFollowers([]string{"b"}, 2)
	g.Update("a", Position{Written: 20, Durable: 20})
	if p := g.Positions(); len(p) != 1 || p["b"] != (Position{Written: 8, Durable: 6}) {
		t.Fatalf("positions after dropping a: %v", p)
	}
}

// A waiter blocked because the gate had too few followers for its count
// wakes when SetFollowers lowers what it waits for; a lowered count is
// enough, no position report needed.
func TestGateSetFollowersWakesWaiters(t *testing.T) {
	g := NewGate(Written, 3, []string{"a"})
	g.Update("a", Position{Written: 50})
	if c := g.Ceiling(); c != 0 {
		t.Fatalf("ceiling %d with one follower and three copies required", c)
	}
	stop := make(chan struct{})
	defer close(stop)
	done := make(chan error, 1)
	go func() { done <- g.Wait(stop, 40) }()
	g.SetFollowers([]string{"a", "b"}, 2)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken by SetFollowers")
	}
}

// Reports and follower changes race without losing a kept follower's
// progress (run with -race).
func TestGateSetFollowersConcurrent(t *testing.T) {
	g := NewGate(Durable, 2, []string{"f0"})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range uint64(500) {
				g.Update(fmt.Sprint("f", i), Position{Written: n + 1, Durable: n + 1})
			}
		}()
	}
	names := []string{"f0"}
	for i := 1; i < 4; i++ {
		names = append(names, fmt.Sprint("f", i))
		g.SetFollowers(names, len(names)/2+1)
	}
	wg.Wait()
	if p := g.Positions()["f0"]; p.Durable != 500 {
		t.Fatalf("f0 at %v, want durable 500: a kept follower lost progress", p)
	}
}

// A follower not heard from for longer than the hold no longer holds
// retention back; a report brings it back into the floor, and a zero hold
// holds for every follower however long.
func TestGateFloorPassesAFollowerGoneTooLong(t *testing.T) {
	g := NewGate(Durable, 2, []string{"live", "gone"})
	g.Update("live", Position{Written: 100, Durable: 90})
	const hold = time.Hour
	now := time.Now()
	if f := g.FloorAt(hold, now); f != 0 {
		t.Fatalf("floor %d within the hold, want 0 (gone holds it)", f)
	}
	g.mu.Lock()
	g.heard["gone"] = now.Add(-2 * hold) // its last report, two hours ago
	g.mu.Unlock()
	if f := g.FloorAt(hold, now); f != 90 {
		t.Fatalf("floor %d with gone past the hold, want 90 (live's)", f)
	}
	if f := g.FloorAt(0, now); f != 0 {
		t.Fatalf("floor %d with no hold, want 0 (every follower holds)", f)
	}
	g.Update("gone", Position{Written: 40, Durable: 30})
	if f := g.FloorAt(hold, time.Now()); f != 30 {
		t.Fatalf("floor %d once gone reported again, want 30", f)
	}
	// Kept across a change of followers; a new one starts heard now.
	g.mu.Lock()
	g.heard["gone"] = now.Add(-2 * hold)
	g.mu.Unlock()
	g.SetFollowers([]string{"live", "gone", "new"}, 2)
	if f := g.FloorAt(hold, time.Now()); f != 0 {
		t.Fatalf("floor %d with a new follower at 0, want 0", f)
	}
	g.Update("new", Position{Written: 90, Durable: 90})
	if f := g.FloorAt(hold, time.Now()); f != 90 {
		t.Fatalf("floor %d: gone stays past the hold across SetFollowers, want 90", f)
	}
}

// WaitFor counts durable positions when asked, whatever the gate's
// boundary (a record appended under the durable rule before a change to
// buffered), and gives up once the owner is fenced, even with the ceiling
// reached: a fenced owner confirms nothing more.
func TestGateWaitForDurableAndFenced(t *testing.T) {
	g := NewGate(Written, 2, []string{"a"})
	g.Update("a", Position{Written: 20, Durable: 5})
	stop, fenced := make(chan struct{}), make(chan struct{})
	defer close(stop)
	if err := g.WaitFor(WaitOptions{Stop: stop, Fenced: fenced}, 20); err != nil {
		t.Fatalf("written wait with a written at 20: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- g.WaitFor(WaitOptions{Stop: stop, Fenced: fenced, Durable: true}, 20) }()
	g.Update("a", Position{Written: 25, Durable: 19}) // still short of 20 durable
	g.Update("a", Position{Written: 25, Durable: 20})
	if err := <-done; err != nil {
		t.Fatalf("durable wait: %v", err)
	}
	go func() { done <- g.WaitFor(WaitOptions{Stop: stop, Fenced: fenced, Durable: true}, 30) }()
	close(fenced)
	if err := <-done; err != ErrFenced {
		t.Fatalf("a waiter when the owner is fenced: %v, want ErrFenced", err)
	}
	if err := g.WaitFor(WaitOptions{Stop: stop, Fenced: fenced}, 10); err != ErrFenced {
		t.Fatalf("a wait already met, the owner fenced: %v, want ErrFenced", err)
	}
}
