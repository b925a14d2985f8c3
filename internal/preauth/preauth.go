// Package preauth bounds the connections a listener holds before they
// have authenticated (accepted, and their handshake not done yet): in
// number, per source and in total, with a deadline that shortens under
// pressure.
//
// When a new connection finds its source, or the whole set, at its
// limit, the oldest waiting connection of its source (at the total limit:
// of the source holding the most) is closed to make room, rather than
// the newcomer refused. A flood from a few addresses then costs those
// addresses their own sockets, while a peer that completes its handshake
// within a round trip of connecting gets in, whatever the flood.
// Refusing newcomers instead would let whoever holds the slots lock every
// peer out for the handshake timeout.
//
// Under pressure (more than half of Max waiting, until no more than a
// quarter are) the deadline shortens to PressureTimeout, for new
// connections and for those already waiting, so that a flood drains
// quickly.
package preauth

import (
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Set. Every field is required.
type Options struct {
	// Max bounds the waiting connections in total.
	Max int
	// PerSource bounds them per source (SourceOf); at most Max.
	PerSource int
	// Timeout is a waiting connection's deadline from its accept.
	Timeout time.Duration
	// PressureTimeout replaces Timeout under pressure.
	PressureTimeout time.Duration
}

// Set is the connections waiting to authenticate, by source, each
// source's oldest first. It is safe for concurrent use.
type Set struct {
	o       Options
	evicted atomic.Uint64

	mu       sync.Mutex // guards the fields below and every Entry's in
	bySource map[netip.Prefix][]*Entry
	n        int
	pressure bool
	warnedAt time.Time
}

// New returns an empty Set.
func New(o Options) *Set {
	o.PerSource = min(max(o.PerSource, 1), max(o.Max, 1))
	o.Max = max(o.Max, 1)
	return &Set{o: o, bySource: map[netip.Prefix][]*Entry{}}
}

// Entry is one waiting connection.
type Entry struct {
	source  netip.Prefix
	shorten func(deadline time.Time)
	evict   func()
	short   atomic.Bool
	in      bool // counted in the set; under Set.mu
}

// Source is what the entry counts against.
func (e *Entry) Source() netip.Prefix { return e.source }

// Short reports whether the entry's deadline is the pressure timeout.
func (e *Entry) Short() bool { return e.short.Load() }

// Evict closes the connection, with the evict function Add was given.
func (e *Entry) Evict() { e.evict() }

// Admission is what Add decided for a new connection.
type Admission struct {
	Entry    *Entry
	Deadline time.Time // the deadline its handshake must meet
	// Evict is the waiting connection that makes room for it (nil: there
	// was room); the caller calls its Evict, outside its own locks. Warn
	// is set on at most one eviction a minute, for the caller to log.
	Evict *Entry
	Warn  bool
}

// Add counts a new connection from source as waiting. shorten applies a
// shorter deadline to it while it waits (pressure); it is called under
// the set's lock and must not block. evict closes it.
func (s *Set) Add(source netip.Prefix, shorten func(time.Time), evict func(), now time.Time) Admission {
	e := &Entry{source: source, shorten: shorten, evict: evict}
	s.mu.Lock()
	defer s.mu.Unlock()
	var a Admission
	switch {
	case len(s.bySource[source]) >= s.o.PerSource:
		a.Evict = s.bySource[source][0]
	case s.n >= s.o.Max:
		var busiest []*Entry
		for _, q := range s.bySource {
			if len(q) > len(busiest) {
				busiest = q
			}
		}
		a.Evict = busiest[0]
	}
	if a.Evict != nil {
		s.doneLocked(a.Evict)
		s.evicted.Add(1)
		if now.Sub(s.warnedAt) >= time.Minute {
			s.warnedAt, a.Warn = now, true
		}
	}
	s.bySource[source] = append(s.bySource[source], e)
	s.n++
	e.in = true
	if !s.pressure && s.n > s.o.Max/2 {
		s.pressure = true
		deadline := now.Add(s.o.PressureTimeout)
		for _, q := range s.bySource {
			for _, w := range q {
				if w != e && !w.short.Swap(true) {
					w.shorten(deadline)
				}
			}
		}
	}
	a.Entry, a.Deadline = e, now.Add(s.o.Timeout)
	if s.pressure {
		e.short.Store(true)
		a.Deadline = now.Add(s.o.PressureTimeout)
	}
	return a
}

// Done stops counting e as waiting: it authenticated, was evicted, or
// ended. Calling it again does nothing.
func (s *Set) Done(e *Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.doneLocked(e)
}

func (s *Set) doneLocked(e *Entry) {
	if !e.in {
		return
	}
	e.in = false
	q := s.bySource[e.source]
	if i := slices.Index(q, e); i >= 0 {
		q = slices.Delete(q, i, i+1)
	}
	if len(q) == 0 {
		delete(s.bySource, e.source)
	} else {
		s.bySource[e.source] = q
	}
	s.n--
	if s.pressure && s.n <= s.o.Max/4 {
		s.pressure = false // new connections get the full timeout again
	}
}

// Len is the number of connections waiting.
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// Evicted is how many waiting connections were closed to make room.
func (s *Set) Evicted() uint64 { return s.evicted.Load() }

// SourceOf is the source a connection from a counts against: its IPv4
// address, or its IPv6 /64 (one host's usual share, so a host cannot
// spread a flood over its own addresses). Addresses that are not TCP are
// one source.
func SourceOf(a net.Addr) netip.Prefix {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Prefix{}
	}
	ip, ok := netip.AddrFromSlice(ta.IP)
	if !ok {
		return netip.Prefix{}
	}
	ip = ip.Unmap()
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits)
	return p
}

// Holds reports whether e is counted as waiting.
func (s *Set) Holds(e *Entry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return e.in
}

// Pressure reports whether the set is under pressure: new connections get
// PressureTimeout.
func (s *Set) Pressure() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pressure
}
