package server

import (
	"net"
	"net/netip"
	"slices"
	"time"
)

// Connections that have not authenticated yet (pre-Hello: accepted, the
// Hello not read, or read and refused) are bounded in number, per source
// and in total, and cost little each: no writer goroutine and a 4 KiB read
// buffer until the Hello is read, and a Hello frame no longer than the
// longest token and client name allow.
//
// When a new connection finds its source, or the whole server, at its
// limit, the oldest pre-Hello connection of its source (at the total
// limit: of the source holding the most) is closed to make room, rather
// than the newcomer refused. A flood from a few addresses then costs those
// addresses their own sockets, while a client that sends its Hello within
// a round trip of connecting gets in, authenticated, whatever the flood.
// Refusing newcomers instead would let whoever holds the slots lock every
// client out for the Hello timeout.
//
// Under pressure (more than half of the total limit waiting, until no more
// than a quarter are) the Hello timeout shortens to PressureHelloTimeout,
// for new connections and for those already waiting, so that a flood
// drains quickly.

// preHelloBuffer is a connection's read buffer until its Hello is read.
const preHelloBuffer = 4 << 10

// preHelloSet is the pre-Hello connections by source, each source's
// oldest first. Guarded by Server.mu.
type preHelloSet struct {
	bySource map[netip.Prefix][]*conn
	n        int
	pressure bool      // more than half of MaxPreHello waiting
	warnedAt time.Time // last warning about the limit: at most one a minute
}

// sourceOf is the source a connection counts against: its IPv4 address,
// or its IPv6 /64 (one host's usual share, so a host cannot spread a
// flood over its own addresses). Addresses that are not TCP are one
// source.
func sourceOf(a net.Addr) netip.Prefix {
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

// addPreHelloLocked counts c as waiting for its Hello and returns the
// connection to close to make room (nil if there was room) and the
// deadline c's Hello must meet. Call it with s.mu held.
func (s *Server) addPreHelloLocked(c *conn, now time.Time) (evict *conn, deadline time.Time) {
	set := &s.preHello
	if set.bySource == nil {
		set.bySource = make(map[netip.Prefix][]*conn)
	}
	switch {
	case len(set.bySource[c.source]) >= s.opts.MaxPreHelloPerSource:
		evict = set.bySource[c.source][0]
	case set.n >= s.opts.MaxPreHello:
		var busiest []*conn
		for _, q := range set.bySource {
			if len(q) > len(busiest) {
				busiest = q
			}
		}
		evict = busiest[0]
	}
	if evict != nil {
		s.dropPreHelloLocked(evict)
		s.evicted.Add(1)
		if now.Sub(set.warnedAt) >= time.Minute {
			set.warnedAt = now
			s.log.Warn("too many client connections waiting for their Hello; closing the oldest of the busiest source",
				"limit", s.opts.MaxPreHello, "per_source", s.opts.MaxPreHelloPerSource,
				"source", evict.source.String(), "evicted_total", s.evicted.Load())
		}
	}
	set.bySource[c.source] = append(set.bySource[c.source], c)
	set.n++
	c.waitingHello = true
	if !set.pressure && set.n > s.opts.MaxPreHello/2 {
		set.pressure = true
		s.shortenHellosLocked(now)
	}
	if set.pressure {
		c.shortHello.Store(true)
		return evict, now.Add(s.opts.PressureHelloTimeout)
	}
	return evict, now.Add(s.opts.HelloTimeout)
}

// shortenHellosLocked gives every connection waiting for its Hello at
// most PressureHelloTimeout more.
func (s *Server) shortenHellosLocked(now time.Time) {
	deadline := now.Add(s.opts.PressureHelloTimeout)
	for _, q := range s.preHello.bySource {
		for _, c := range q {
			if !c.shortHello.Swap(true) {
				c.nc.SetReadDeadline(deadline) // safe from any goroutine; the reader set none since
			}
		}
	}
}

// dropPreHelloLocked stops counting c as waiting for its Hello: it
// authenticated, was evicted, or ended.
func (s *Server) dropPreHelloLocked(c *conn) {
	if !c.waitingHello {
		return
	}
	c.waitingHello = false
	set := &s.preHello
	q := set.bySource[c.source]
	if i := slices.Index(q, c); i >= 0 {
		q = slices.Delete(q, i, i+1)
	}
	if len(q) == 0 {
		delete(set.bySource, c.source)
	} else {
		set.bySource[c.source] = q
	}
	set.n--
	if set.pressure && set.n <= s.opts.MaxPreHello/4 {
		set.pressure = false // new connections get the full timeout again
	}
}
