package server

import (
	"time"

	"github.com/fibril-edge/fibril/internal/preauth"
)

// Connections that have not authenticated yet (pre-Hello: accepted, the
// Hello not read, or read and refused) are bounded in number, per source
// and in total (internal/preauth: the oldest of the busiest source makes
// room for a newcomer, and the Hello timeout shortens to
// PressureHelloTimeout under pressure), and cost little each: no writer
// goroutine and a 4 KiB read buffer until the Hello is read, and a Hello
// frame no longer than the longest token and client name allow.

// preHelloBuffer is a connection's read buffer until its Hello is read.
const preHelloBuffer = 4 << 10

func newPreHelloSet(o Options) *preauth.Set {
	return preauth.New(preauth.Options{Max: o.MaxPreHello, PerSource: o.MaxPreHelloPerSource,
		Timeout: o.HelloTimeout, PressureTimeout: o.PressureHelloTimeout})
}

// addPreHello counts c as waiting for its Hello, sets the deadline its
// Hello must meet, and returns the waiting connection to evict to make
// room (nil if there was room), which the caller evicts outside its locks.
func (s *Server) addPreHello(c *conn, now time.Time) (evict *preauth.Entry) {
	a := s.preHello.Add(preauth.SourceOf(c.raw.RemoteAddr()), func(deadline time.Time) {
		c.nc.SetReadDeadline(deadline) // safe from any goroutine; the reader set none since
	}, func() {
		c.log.Debug("closing a connection still waiting for its Hello, to make room")
		c.close()
	}, now)
	c.pre = a.Entry
	// The Hello's deadline is set here, before the reader starts, so that
	// a shortening under pressure is never undone.
	c.rc.fixed(a.Deadline)
	if a.Warn {
		s.log.Warn("too many client connections waiting for their Hello; closing the oldest of the busiest source",
			"limit", s.opts.MaxPreHello, "per_source", s.opts.MaxPreHelloPerSource,
			"source", a.Evict.Source().String(), "evicted_total", s.preHello.Evicted())
	}
	return a.Evict
}
