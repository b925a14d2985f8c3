package server

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The delivery budget bounds the bytes of Deliver frames queued to
// consumers across every connection: queued in an outbox or in the
// writer's hands, not yet written to the socket. One connection's share is
// bounded by its outbox limits and its subscriptions' windows; the budget
// bounds their sum, which many slow consumers could otherwise push past
// what a small box holds.
//
// When a delivery takes the total past the budget, the connections with the
// most bytes queued (the slowest consumers) are paused, slowest first,
// until the others hold at most half the budget: their subscriptions take
// no new deliveries, which go to the other consumers of their queues.
// A paused connection resumes once it has written half of what it held
// when paused (to its socket: what the kernel's buffers take counts as
// written, since it no longer sits in the broker's memory) and the total
// is within the budget, checked as it writes and when the total comes
// back within the budget (another connection wrote or was closed). One that has
// not within the grace period is sent
// Goodbye{reason}, what is still queued to it is dropped (its deliveries
// are released when the connection closes, without counting a delivery),
// and it is closed. Deliveries already handed to a connection when it is
// paused still go out, so the budget can be passed by those, and by what
// other connections queue while the slowest is paused.

// budgetScanEvery spaces the scans for the slowest connection while the
// total stays past the budget.
const budgetScanEvery = 10 * time.Millisecond

// deliveryBudget is the server's budget. total and lastScan are atomics;
// mu guards paused.
type deliveryBudget struct {
	limit int64 // bytes; 0: no budget
	grace time.Duration

	total    atomic.Int64 // Deliver bytes queued on every connection
	lastScan atomic.Int64 // unix nanos of the last scan

	pauses, closed atomic.Uint64

	mu     sync.Mutex // guards paused; taken before Server.mu, never after
	paused map[*conn]*pausedConn

	// within runs, on a goroutine of its own, when the total comes back
	// within the limit (Server.resumeCaughtUp).
	within func()
}

type pausedConn struct {
	held  int64 // bytes queued when paused
	timer *time.Timer
}

// add counts n bytes of deliveries queued (negative: written or dropped).
// The step that brings the total back within the limit starts within:
// a paused connection that wrote its share while another held the total
// over the limit resumes then, not only when it writes again (it may have
// nothing left to write).
func (b *deliveryBudget) add(n int64) int64 {
	t := b.total.Add(n)
	if n < 0 && b.limit > 0 && t <= b.limit && t-n > b.limit && b.within != nil {
		go b.within()
	}
	return t
}

// overBudget runs after a delivery took the total past the budget: at
// most once per budgetScanEvery, it pauses the connections with the most
// deliveries queued, slowest first, until what the others hold is within
// half the budget. Pausing only the slowest one per scan let twenty
// consumers that never read queue five times the budget between them.
func (s *Server) overBudget(now time.Time) {
	b := &s.budget
	last := b.lastScan.Load()
	if now.UnixNano()-last < int64(budgetScanEvery) || !b.lastScan.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	type queued struct {
		c *conn
		n int64
	}
	var all []queued
	var total int64
	s.mu.Lock()
	for c := range s.conns {
		if n := c.out.queuedDeliveries(); n > 0 {
			all = append(all, queued{c, n})
			total += n
		}
	}
	s.mu.Unlock()
	slices.SortFunc(all, func(a, b queued) int { return cmp.Compare(b.n, a.n) })
	var pause []queued
	b.mu.Lock()
	if b.paused == nil {
		b.paused = make(map[*conn]*pausedConn)
	}
	for _, q := range all {
		if total <= b.limit/2 {
			break
		}
		total -= q.n
		if _, ok := b.paused[q.c]; ok {
			continue
		}
		p := &pausedConn{held: q.n}
		c := q.c
		p.timer = time.AfterFunc(b.grace, func() { s.graceEnded(c, p) })
		b.paused[c] = p
		b.pauses.Add(1)
		pause = append(pause, q)
	}
	b.mu.Unlock()
	for _, q := range pause {
		q.c.log.Warn("delivery budget exceeded; pausing a slow consumer",
			"queued_bytes", q.n, "total_bytes", b.total.Load(), "budget", b.limit, "grace", b.grace)
		q.c.setPaused(true)
		// The writer checks the flag after each delivery it writes; if it
		// wrote what it had before the flag was set, nothing would resume it.
		s.written(q.c)
	}
}

// written runs after the writer wrote deliveries of a paused connection:
// once it has written half of what it held when paused, and the broker is
// back within its budget, it resumes. (Resumed while the budget is still
// exceeded, with nothing new queued to pause it again, it would stay
// over the budget for good.)
func (s *Server) written(c *conn) {
	b := &s.budget
	b.mu.Lock()
	p, ok := b.paused[c]
	if !ok || c.out.queuedDeliveries() > p.held/2 || b.total.Load() > b.limit {
		b.mu.Unlock()
		return
	}
	delete(b.paused, c)
	p.timer.Stop()
	b.mu.Unlock()
	c.log.Info("slow consumer caught up; resuming its deliveries", "queued_bytes", c.out.queuedDeliveries())
	c.setPaused(false)
}

// resumeCaughtUp resumes the paused connections that have written half of
// what they held.
func (s *Server) resumeCaughtUp() {
	b := &s.budget
	b.mu.Lock()
	paused := make([]*conn, 0, len(b.paused))
	for c := range b.paused {
		paused = append(paused, c)
	}
	b.mu.Unlock()
	for _, c := range paused {
		s.written(c)
	}
}

// graceEnded disconnects a connection still paused a grace period after
// it was paused.
func (s *Server) graceEnded(c *conn, p *pausedConn) {
	b := &s.budget
	b.mu.Lock()
	if b.paused[c] != p {
		b.mu.Unlock()
		return // resumed, or gone
	}
	delete(b.paused, c)
	b.mu.Unlock()
	select {
	case <-c.done:
		return // it closed meanwhile (it was paused as it went)
	default:
	}
	b.closed.Add(1)
	queued := c.out.queuedDeliveries()
	reason := fmt.Sprintf("consumer too slow: %d bytes of deliveries unread for %v past the broker's delivery budget of %d bytes (server.delivery_budget)",
		queued, b.grace, b.limit)
	c.log.Warn("closing a slow consumer", "queued_bytes", queued, "budget", b.limit, "grace", b.grace)
	c.shedDeliveries(reason)
}

// forgetBudget drops a closed connection from the paused set.
func (s *Server) forgetBudget(c *conn) {
	b := &s.budget
	b.mu.Lock()
	if p, ok := b.paused[c]; ok {
		p.timer.Stop()
		delete(b.paused, c)
	}
	b.mu.Unlock()
}

// QueuedDeliveryBytes is the bytes of Deliver frames queued to consumers,
// not yet written, on every connection: what Options.DeliveryBudget
// bounds.
func (s *Server) QueuedDeliveryBytes() int64 { return s.budget.total.Load() }

// SlowConsumers reports the delivery budget's work since the server
// started: connections paused, connections closed for staying slow past
// the grace period, and connections paused now.
func (s *Server) SlowConsumers() (pauses, closed uint64, pausedNow int) {
	b := &s.budget
	b.mu.Lock()
	pausedNow = len(b.paused)
	b.mu.Unlock()
	return b.pauses.Load(), b.closed.Load(), pausedNow
}
