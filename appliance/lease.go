package appliance

import (
	"container/heap"
	"time"
)

// Leases and dispatch. dispatchCore holds what a partition decides about
// delivery: its applied state, the leases its subscriptions hold, the
// expiry order of those leases and the round-robin position among its
// subscriptions. It is plain data: no goroutines, no locks, no clock and
// no log; all it asks outside itself is credit (consumer). Its methods
// take the event and the instant they decide at and return what the shell
// must do: deliveries to make, leases whose credit goes back to their
// subscription, offsets to settle through the log. The partition
// (partition.go) owns one under its mutex and does the I/O around it.

// consumer is what the core asks of a subscription: credit, which the
// subscription shares with its other partitions, so the core reserves it
// one delivery at a time, only for a message that is there (hasCredit
// asks without reserving), and gives back a reservation it could not use.
type consumer interface {
	comparable
	hasCredit() bool
	takeCredit() bool
	returnCredit()
}

// lease is one message held by one subscription until deadline. A
// delayed lease (a nack with a delay) is held by no subscription any more:
// its sub is the zero C, its credit went back, and its deadline is when the
// message is requeued.
type lease[C consumer] struct {
	tag      uint64
	sub      C
	offset   uint64
	deadline time.Time
	delayed  bool
	index    int // in the expiry heap
}

// dispatch is a lease just granted: the shell records it with its
// subscription, reads the message body and delivers it.
type dispatch[C consumer] struct {
	sub        C
	tag        uint64
	offset     uint64
	deliveries uint32 // counting this one
}

type dispatchCore[C consumer] struct {
	st     *partitionState
	leases map[uint64]*lease[C] // by delivery tag
	expiry leaseHeap[C]         // the same leases, earliest deadline first
	subs   []C                  // in the order they attached
	rr     int                  // next subscription to offer a message to
}

func newDispatchCore[C consumer](st *partitionState) dispatchCore[C] {
	return dispatchCore[C]{st: st, leases: make(map[uint64]*lease[C])}
}

// dispatch pairs ready messages with subscriptions that have credit, round
// robin, lowest offset first. Each lease runs until now+ackDeadline and
// gets its tag from newTag.
func (c *dispatchCore[C]) dispatch(now time.Time, ackDeadline time.Duration, newTag func() uint64) []dispatch[C] {
	var out []dispatch[C]
	for len(c.subs) > 0 {
		progressed := false
		for range c.subs {
			sub := c.subs[c.rr%len(c.subs)]
			c.rr++
			// Credit is taken only for a message that is there: credit
			// is shared by every partition of a subscription, and credit
			// taken and given back here would hide it, for that moment,
			// from another partition's dispatch, which would then sleep
			// with a message ready and nothing to wake it.
			if c.st.oldestReady() == nil {
				if sub.hasCredit() {
					return out // its turn passes with nothing offered
				}
				continue
			}
			if !sub.takeCredit() {
				continue
			}
			m := c.st.nextReady()
			if m == nil { // oldestReady saw one: not reached
				sub.returnCredit()
				return out
			}
			l := &lease[C]{tag: newTag(), sub: sub, offset: m.offset, deadline: now.Add(ackDeadline)}
			c.leases[l.tag] = l
			heap.Push(&c.expiry, l)
			out = append(out, dispatch[C]{sub: sub, tag: l.tag, offset: m.offset, deliveries: m.deliveries + 1})
			progressed = true
		}
		if !progressed {
			break
		}
	}
	return out
}

// expire ends the leases whose deadline is not after now, earliest first.
// Their messages are settling. Of the expired leases the shell gives the
// credit back and appends an expiry; the delayed ones, whose credit went
// back at the nack, it requeues as a nack does. Both count a delivery.
func (c *dispatchCore[C]) expire(now time.Time) (expired, delayed []*lease[C]) {
	for len(c.expiry) > 0 && !c.expiry[0].deadline.After(now) {
		l := c.expiry[0]
		c.drop(l)
		c.settling(l.offset)
		if l.delayed {
			delayed = append(delayed, l)
		} else {
			expired = append(expired, l)
		}
	}
	return expired, delayed
}

// settle ends the leases sub holds among tags, in the order given; their
// messages are settling, and the shell appends the decision for them.
// Tags sub does not hold here are returned as stale and change nothing.
func (c *dispatchCore[C]) settle(sub C, tags []uint64) (ended []*lease[C], stale []uint64) {
	for _, tag := range tags {
		l, ok := c.held(sub, tag)
		if !ok {
			stale = append(stale, tag)
			continue
		}
		c.drop(l)
		c.settling(l.offset)
		ended = append(ended, l)
	}
	return ended, stale
}

// extend moves the deadline of the leases sub holds among tags to until,
// earlier or later. Tags sub does not hold here are returned as stale and
// change nothing.
func (c *dispatchCore[C]) extend(sub C, tags []uint64, until time.Time) (stale []uint64) {
	for _, tag := range tags {
		l, ok := c.held(sub, tag)
		if !ok {
			stale = append(stale, tag)
			continue
		}
		c.moveDeadline(l, until)
	}
	return stale
}

// delay detaches the leases sub holds among tags from it: the shell gives
// the credit of the returned tags back now, and their messages stay out of
// reach until until, when expire returns them as delayed. Tags sub does
// not hold here are returned as stale and change nothing.
func (c *dispatchCore[C]) delay(sub C, tags []uint64, until time.Time) (detached, stale []uint64) {
	for _, tag := range tags {
		l, ok := c.held(sub, tag)
		if !ok {
			stale = append(stale, tag)
			continue
		}
		detached = append(detached, tag)
		var none C
		l.sub, l.delayed = none, true
		c.moveDeadline(l, until)
	}
	return detached, stale
}

// held finds the lease sub holds under tag: not delayed, not another's.
func (c *dispatchCore[C]) held(sub C, tag uint64) (*lease[C], bool) {
	l, ok := c.leases[tag]
	if !ok || l.delayed || l.sub != sub {
		return nil, false
	}
	return l, true
}

func (c *dispatchCore[C]) moveDeadline(l *lease[C], until time.Time) {
	l.deadline = until
	heap.Fix(&c.expiry, l.index)
}

// nextDeadline is when the earliest lease expires: the dispatcher's timer
// must fire then. Without leases there is nothing to wake for.
func (c *dispatchCore[C]) nextDeadline() (time.Time, bool) {
	if len(c.expiry) == 0 {
		return time.Time{}, false
	}
	return c.expiry[0].deadline, true
}

func (c *dispatchCore[C]) addSub(sub C) { c.subs = append(c.subs, sub) }

// removeSub detaches sub. What it held becomes ready again without
// counting a delivery; the returned leases give their credit back. Its
// delayed leases are no longer its own and wait for their deadline.
func (c *dispatchCore[C]) removeSub(sub C) []*lease[C] {
	for i, x := range c.subs {
		if x == sub {
			c.subs = append(c.subs[:i], c.subs[i+1:]...)
			break
		}
	}
	var ended []*lease[C]
	for _, l := range c.leases {
		if !l.delayed && l.sub == sub {
			c.drop(l)
			c.st.unlease(l.offset)
			ended = append(ended, l)
		}
	}
	return ended
}

// dropRange forgets the messages in [from, to), leased or not (their
// records were quarantined), and returns the leases that ended with them
// (delayed ones among them hold no credit) and how many messages were
// lost.
func (c *dispatchCore[C]) dropRange(from, to uint64) (ended []*lease[C], lost int64) {
	for _, l := range c.leases {
		if l.offset >= from && l.offset < to {
			c.drop(l)
			ended = append(ended, l)
		}
	}
	return ended, c.st.dropRange(from, to)
}

func (c *dispatchCore[C]) drop(l *lease[C]) {
	delete(c.leases, l.tag)
	heap.Remove(&c.expiry, l.index)
}

func (c *dispatchCore[C]) settling(offset uint64) {
	if m := c.st.msgs.get(offset); m != nil {
		m.status = msgSettling
	}
}

// leaseOffsets lists the offsets of leases, in order.
func leaseOffsets[C consumer](ls []*lease[C]) []uint64 {
	offs := make([]uint64, len(ls))
	for i, l := range ls {
		offs[i] = l.offset
	}
	return offs
}

type leaseHeap[C consumer] []*lease[C]

func (h leaseHeap[C]) Len() int           { return len(h) }
func (h leaseHeap[C]) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h leaseHeap[C]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *leaseHeap[C]) Push(x any) {
	l := x.(*lease[C])
	l.index = len(*h)
	*h = append(*h, l)
}
func (h *leaseHeap[C]) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.index = -1
	return l
}
