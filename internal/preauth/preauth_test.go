package preauth

import (
	"net"
	"net/netip"
	"testing"
	"time"
)

type fakeConn struct {
	name     string
	deadline time.Time
	evicted  bool
}

func add(s *Set, src string, name string, now time.Time) (*fakeConn, Admission) {
	c := &fakeConn{name: name}
	a := s.Add(netip.MustParsePrefix(src), func(d time.Time) { c.deadline = d }, func() { c.evicted = true }, now)
	c.deadline = a.Deadline
	if a.Evict != nil {
		a.Evict.Evict()
	}
	return c, a
}

// A source at its limit makes room with its own oldest connection; at the
// total limit the busiest source gives up its oldest, never the newcomer.
func TestEvictsTheOldestOfTheBusiestSource(t *testing.T) {
	s := New(Options{Max: 4, PerSource: 2, Timeout: 10 * time.Second, PressureTimeout: time.Second})
	now := time.Now()
	a1, _ := add(s, "10.0.0.1/32", "a1", now)
	a2, _ := add(s, "10.0.0.1/32", "a2", now)
	a3, adm := add(s, "10.0.0.1/32", "a3", now)
	if !a1.evicted || a2.evicted || a3.evicted || adm.Evict == nil || !adm.Warn {
		t.Fatalf("per source: a1 %v a2 %v a3 %v warn %v", a1.evicted, a2.evicted, a3.evicted, adm.Warn)
	}
	b1, _ := add(s, "10.0.0.2/32", "b1", now)
	c1, _ := add(s, "10.0.0.3/32", "c1", now) // 4 waiting: a2 a3 b1 c1
	d1, adm := add(s, "10.0.0.4/32", "d1", now)
	if !a2.evicted || a3.evicted || b1.evicted || c1.evicted || d1.evicted {
		t.Fatalf("at the total limit the busiest source's oldest goes: a2 %v a3 %v b1 %v c1 %v d1 %v",
			a2.evicted, a3.evicted, b1.evicted, c1.evicted, d1.evicted)
	}
	if adm.Warn {
		t.Fatal("a second warning within the minute")
	}
	if s.Len() != 4 || s.Evicted() != 2 {
		t.Fatalf("len %d evicted %d, want 4 and 2", s.Len(), s.Evicted())
	}
}

// Past half of Max every waiting connection's deadline shortens, and
// new ones get the short one, until no more than a quarter wait.
func TestPressureShortensEveryDeadline(t *testing.T) {
	s := New(Options{Max: 8, PerSource: 8, Timeout: 10 * time.Second, PressureTimeout: time.Second})
	now := time.Now()
	var conns []*fakeConn
	var entries []*Entry
	for i := range 5 {
		c, a := add(s, "10.0.0.1/32", "c", now.Add(time.Duration(i)*time.Millisecond))
		conns, entries = append(conns, c), append(entries, a.Entry)
	}
	for i, c := range conns {
		if want := now.Add(4*time.Millisecond + time.Second); !c.deadline.Equal(want) {
			t.Fatalf("conn %d: deadline %v, want the pressure deadline %v", i, c.deadline, want)
		}
		if !entries[i].Short() {
			t.Fatalf("conn %d not short", i)
		}
	}
	if !s.Pressure() {
		t.Fatal("no pressure with 5 of 8 waiting")
	}
	for _, e := range entries[:3] {
		s.Done(e)
		s.Done(e) // again: nothing
	}
	if s.Pressure() || s.Len() != 2 {
		t.Fatalf("pressure %v with %d waiting, want none with 2", s.Pressure(), s.Len())
	}
	if _, a := add(s, "10.0.0.1/32", "late", now); a.Entry.Short() || !a.Deadline.Equal(now.Add(10*time.Second)) {
		t.Fatalf("after the pressure: short %v deadline %v", a.Entry.Short(), a.Deadline)
	}
}

func TestSourceOf(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.7:1":          "192.0.2.7/32",
		"[::ffff:192.0.2.7]:1": "192.0.2.7/32",
		"[2001:db8::1]:1":      "2001:db8::/64",
		"[2001:db8::ffff]:9":   "2001:db8::/64",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := SourceOf(a); got.String() != want {
			t.Errorf("SourceOf(%s) = %s, want %s", addr, got, want)
		}
	}
}
