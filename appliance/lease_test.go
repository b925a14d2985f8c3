package appliance

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/wal"
)

// The dispatch core decides at instants the tests choose: no test here
// sleeps or reads the clock.

// testConsumer is a subscription reduced to its credit.
type testConsumer struct {
	name   string
	credit int
	taken  int // reservations made, given back or not
}

func (c *testConsumer) hasCredit() bool { return c.credit > 0 }

func (c *testConsumer) takeCredit() bool {
	if c.credit <= 0 {
		return false
	}
	c.credit--
	c.taken++
	return true
}

func (c *testConsumer) returnCredit() { c.credit++ }

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// newTestCore is a core over a partition that published offsets
// 0..n-1, all ready, with tags counting from 1.
func newTestCore(t *testing.T, n int) (*dispatchCore[*testConsumer], func() uint64) {
	t.Helper()
	st := newPartitionState(0)
	for i := range n {
		applyRecord(t, st, recPublish, encodePublish(publishRecord{At: t0, Body: body(i)}), 0)
	}
	c := newDispatchCore[*testConsumer](st)
	var tag uint64
	return &c, func() uint64 { tag++; return tag }
}

// applyRecord applies the next record of a partition, as the applier does
// once the log has it.
func applyRecord(t *testing.T, st *partitionState, kind byte, payload []byte, maxDeliveries int) applyEffect {
	t.Helper()
	eff, err := st.apply(wal.Record{Offset: st.appliedNext, Type: kind, Payload: payload}, maxDeliveries)
	if err != nil {
		t.Fatal(err)
	}
	return eff
}

// describe writes dispatches as "sub:offset/deliveries".
func describe(ds []dispatch[*testConsumer]) []string {
	out := make([]string, 0, len(ds))
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%s:%d/%d", d.sub.name, d.offset, d.deliveries))
	}
	return out
}

func TestDispatchRoundRobinLowestOffsetFirst(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ready   int
		credits []int // one subscription per entry, named a, b, c...
		want    []string
		left    []int // credit each subscription has afterwards
	}{
		{name: "no subscriptions", ready: 3},
		{name: "nothing ready", ready: 0, credits: []int{2}, left: []int{2}},
		{name: "one subscription up to its credit", ready: 3, credits: []int{2},
			want: []string{"a:0/1", "a:1/1"}, left: []int{0}},
		{name: "round robin, unused credit returned", ready: 3, credits: []int{2, 2},
			want: []string{"a:0/1", "b:1/1", "a:2/1"}, left: []int{0, 1}},
		{name: "a subscription without credit is skipped", ready: 3, credits: []int{0, 3},
			want: []string{"b:0/1", "b:1/1", "b:2/1"}, left: []int{0, 0}},
		{name: "round robin continues past a spent subscription", ready: 5, credits: []int{1, 3, 1},
			want: []string{"a:0/1", "b:1/1", "c:2/1", "b:3/1", "b:4/1"}, left: []int{0, 0, 0}},
		{name: "no credit anywhere", ready: 2, credits: []int{0, 0}, left: []int{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, tags := newTestCore(t, tc.ready)
			var subs []*testConsumer
			for i, cr := range tc.credits {
				s := &testConsumer{name: string(rune('a' + i)), credit: cr}
				subs = append(subs, s)
				c.addSub(s)
			}
			ds := c.dispatch(t0, time.Second, tags)
			if got := describe(ds); !slices.Equal(got, tc.want) {
				t.Fatalf("dispatched %v, want %v", got, tc.want)
			}
			for i, s := range subs {
				if s.credit != tc.left[i] {
					t.Errorf("subscription %s has credit %d, want %d", s.name, s.credit, tc.left[i])
				}
			}
			for i, d := range ds {
				if d.tag != uint64(i+1) || c.leases[d.tag] == nil || c.leases[d.tag].deadline != t0.Add(time.Second) {
					t.Errorf("dispatch %d: tag %d, lease %+v", i, d.tag, c.leases[d.tag])
				}
			}
			if ready, _ := c.st.readyCount(); ready != int64(tc.ready-len(ds)) {
				t.Errorf("%d ready after dispatching %d of %d", ready, len(ds), tc.ready)
			}
		})
	}
}

// The round-robin position outlives one dispatch, and a message that comes
// back ready goes out again lowest offset first, counting its deliveries.
func TestDispatchAcrossEvents(t *testing.T) {
	c, tags := newTestCore(t, 1)
	a, b, cc := &testConsumer{name: "a", credit: 1}, &testConsumer{name: "b", credit: 1}, &testConsumer{name: "c", credit: 1}
	for _, s := range []*testConsumer{a, b, cc} {
		c.addSub(s)
	}
	step := func(what string, want ...string) {
		t.Helper()
		if got := describe(c.dispatch(t0, time.Second, tags)); !slices.Equal(got, want) {
			t.Fatalf("%s: dispatched %v, want %v", what, got, want)
		}
	}
	step("one message", "a:0/1") // b was offered nothing
	applyRecord(t, c.st, recPublish, encodePublish(publishRecord{At: t0, Body: body(1)}), 0)
	step("a publish", "c:1/1") // c's turn, then b is offered nothing again
	ended, stale := c.settle(a, []uint64{1})
	if len(ended) != 1 || len(stale) != 0 {
		t.Fatalf("settle: ended %d, stale %v", len(ended), stale)
	}
	a.returnCredit() // what Subscription.release does for the ended lease
	// A settling message is not ready: a is offered nothing.
	step("a release in flight")
	applyRecord(t, c.st, recRelease, encodeSettle(0), 0)
	step("the release applied", "b:0/2") // b's turn
	if a.credit != 1 || b.credit != 0 || cc.credit != 0 {
		t.Fatalf("credit a %d, b %d, c %d", a.credit, b.credit, cc.credit)
	}
}

// Leases expire at their deadline exactly, earliest first, and the timer's
// next instant is the earliest deadline still held.
func TestExpireAtExactInstants(t *testing.T) {
	const ack = 30 * time.Second
	type grant struct {
		at time.Time
		n  int // leases granted at that instant
	}
	for _, tc := range []struct {
		name     string
		grants   []grant
		at       time.Time
		expired  []uint64 // offsets, in order
		next     time.Time
		haveNext bool
	}{
		{name: "nothing held", at: t0.Add(time.Hour)},
		{name: "one nanosecond early", grants: []grant{{t0, 1}}, at: t0.Add(ack - time.Nanosecond),
			next: t0.Add(ack), haveNext: true},
		{name: "at the deadline", grants: []grant{{t0, 1}}, at: t0.Add(ack), expired: []uint64{0}},
		{name: "long past the deadline", grants: []grant{{t0, 2}}, at: t0.Add(24 * time.Hour), expired: []uint64{0, 1}},
		{name: "only the earlier grant", grants: []grant{{t0.Add(10 * time.Second), 1}, {t0, 1}},
			at: t0.Add(ack + 5*time.Second), expired: []uint64{1}, next: t0.Add(ack + 10*time.Second), haveNext: true},
		{name: "earliest first", grants: []grant{{t0.Add(2 * time.Second), 1}, {t0.Add(time.Second), 1}, {t0, 1}},
			at: t0.Add(ack + 2*time.Second), expired: []uint64{2, 1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			for _, g := range tc.grants {
				n += g.n
			}
			c, tags := newTestCore(t, n)
			sub := &testConsumer{name: "a"}
			c.addSub(sub)
			for _, g := range tc.grants {
				sub.credit = g.n
				if ds := c.dispatch(g.at, ack, tags); len(ds) != g.n {
					t.Fatalf("granted %d at %v, want %d", len(ds), g.at, g.n)
				}
			}
			ended, delayed := c.expire(tc.at)
			if len(delayed) != 0 {
				t.Fatalf("%d delayed leases ended with none delayed", len(delayed))
			}
			if got := leaseOffsets(ended); !slices.Equal(got, tc.expired) {
				t.Fatalf("expired %v, want %v", got, tc.expired)
			}
			for _, l := range ended {
				if _, held := c.leases[l.tag]; held {
					t.Errorf("expired lease %d still held", l.tag)
				}
				if m := c.st.msgs.get(l.offset); m == nil || m.status != msgSettling {
					t.Errorf("offset %d after expiry: %+v, want settling", l.offset, m)
				}
			}
			if len(c.leases) != n-len(ended) || len(c.expiry) != len(c.leases) {
				t.Errorf("%d leases, %d in the expiry order, want %d", len(c.leases), len(c.expiry), n-len(ended))
			}
			next, ok := c.nextDeadline()
			if ok != tc.haveNext || !next.Equal(tc.next) {
				t.Errorf("next deadline %v %v, want %v %v", next, ok, tc.next, tc.haveNext)
			}
		})
	}
}

// An expired lease is released through the log: the message comes back
// with one more delivery, and past max deliveries it is not ready again.
func TestExpiryRedeliversUpToMaxDeliveries(t *testing.T) {
	const ack, maxDeliveries = 20 * time.Millisecond, 3
	c, tags := newTestCore(t, 1)
	sub := &testConsumer{name: "a", credit: 1}
	c.addSub(sub)
	now := t0
	var seen []string
	for range maxDeliveries {
		ds := c.dispatch(now, ack, tags)
		seen = append(seen, describe(ds)...)
		deadline, ok := c.nextDeadline()
		if !ok || !deadline.Equal(now.Add(ack)) {
			t.Fatalf("next deadline %v %v after a grant at %v", deadline, ok, now)
		}
		now = deadline
		ended, _ := c.expire(now)
		if got := leaseOffsets(ended); !slices.Equal(got, []uint64{0}) {
			t.Fatalf("expired %v at %v", got, now)
		}
		sub.returnCredit()
		eff := applyRecord(t, c.st, recExpire, encodeSettle(0), maxDeliveries)
		if want := map[bool]applyEffect{true: effectOverLimit, false: effectReady}[len(seen) == maxDeliveries]; eff != want {
			t.Fatalf("expiry %d applied with effect %d, want %d", len(seen), eff, want)
		}
	}
	if want := []string{"a:0/1", "a:0/2", "a:0/3"}; !slices.Equal(seen, want) {
		t.Fatalf("deliveries %v, want %v", seen, want)
	}
	if ds := c.dispatch(now, ack, tags); len(ds) != 0 {
		t.Fatalf("delivered past max deliveries: %v", describe(ds))
	}
	if _, ok := c.nextDeadline(); ok {
		t.Fatal("a deadline is armed with no lease held")
	}
}

func TestSettleLeases(t *testing.T) {
	c, tags := newTestCore(t, 3)
	a, b := &testConsumer{name: "a", credit: 2}, &testConsumer{name: "b", credit: 1}
	c.addSub(a)
	c.addSub(b)
	ds := c.dispatch(t0, time.Second, tags) // a:0 tag 1, b:1 tag 2, a:2 tag 3
	if got := describe(ds); !slices.Equal(got, []string{"a:0/1", "b:1/1", "a:2/1"}) {
		t.Fatalf("dispatched %v", got)
	}
	for _, tc := range []struct {
		name   string
		sub    *testConsumer
		tags   []uint64
		ended  []uint64 // offsets
		stale  []uint64
		remain int // leases held afterwards
	}{
		{name: "unknown tag", sub: a, tags: []uint64{99}, stale: []uint64{99}, remain: 3},
		{name: "another's tag", sub: a, tags: []uint64{2}, stale: []uint64{2}, remain: 3},
		{name: "nothing", sub: a, remain: 3},
		{name: "own tags in the order given, others stale", sub: a, tags: []uint64{3, 2, 1, 7},
			ended: []uint64{2, 0}, stale: []uint64{2, 7}, remain: 1},
		{name: "settled already", sub: a, tags: []uint64{1}, stale: []uint64{1}, remain: 1},
		{name: "the owner", sub: b, tags: []uint64{2}, ended: []uint64{1}},
	} {
		ended, stale := c.settle(tc.sub, tc.tags)
		if got := leaseOffsets(ended); !slices.Equal(got, tc.ended) {
			t.Errorf("%s: ended %v, want %v", tc.name, got, tc.ended)
		}
		if !slices.Equal(stale, tc.stale) {
			t.Errorf("%s: stale %v, want %v", tc.name, stale, tc.stale)
		}
		for _, off := range tc.ended {
			if m := c.st.msgs.get(off); m.status != msgSettling {
				t.Errorf("%s: offset %d is %d, want settling", tc.name, off, m.status)
			}
		}
		if len(c.leases) != tc.remain || len(c.expiry) != tc.remain {
			t.Errorf("%s: %d leases, %d in the expiry order, want %d", tc.name, len(c.leases), len(c.expiry), tc.remain)
		}
	}
	if _, ok := c.nextDeadline(); ok {
		t.Fatal("a deadline is armed after every lease was settled")
	}
	if ds := c.dispatch(t0, time.Second, tags); len(ds) != 0 {
		t.Fatalf("settling messages were dispatched: %v", describe(ds))
	}
}

// An extension moves a held lease's deadline, earlier or later, and keeps
// the expiry order right; stale tags change nothing.
func TestExtendLeases(t *testing.T) {
	const ack = 10 * time.Second
	c, tags := newTestCore(t, 3)
	a, b := &testConsumer{name: "a", credit: 2}, &testConsumer{name: "b", credit: 1}
	c.addSub(a)
	c.addSub(b)
	if got := describe(c.dispatch(t0, ack, tags)); !slices.Equal(got, []string{"a:0/1", "b:1/1", "a:2/1"}) {
		t.Fatalf("dispatched %v", got)
	}
	// tags: a holds 1 (offset 0) and 3 (offset 2), b holds 2 (offset 1).
	if stale := c.extend(a, []uint64{1, 2, 99}, t0.Add(3*ack)); !slices.Equal(stale, []uint64{2, 99}) {
		t.Fatalf("stale %v, want [2 99]", stale)
	}
	if stale := c.extend(a, []uint64{3}, t0.Add(ack/2)); len(stale) != 0 {
		t.Fatalf("stale %v", stale)
	}
	for _, step := range []struct {
		at      time.Time
		expired []uint64 // offsets
		next    time.Time
	}{
		{at: t0.Add(ack/2 - time.Nanosecond), next: t0.Add(ack / 2)},
		{at: t0.Add(ack / 2), expired: []uint64{2}, next: t0.Add(ack)},
		{at: t0.Add(ack), expired: []uint64{1}, next: t0.Add(3 * ack)},
		{at: t0.Add(3*ack - time.Nanosecond), next: t0.Add(3 * ack)},
		{at: t0.Add(3 * ack), expired: []uint64{0}},
	} {
		ended, delayed := c.expire(step.at)
		if got := leaseOffsets(ended); !slices.Equal(got, step.expired) || len(delayed) != 0 {
			t.Fatalf("at %v: expired %v delayed %d, want %v", step.at.Sub(t0), got, len(delayed), step.expired)
		}
		next, ok := c.nextDeadline()
		if ok != !step.next.IsZero() || !next.Equal(step.next) {
			t.Fatalf("at %v: next deadline %v %v, want %v", step.at.Sub(t0), next.Sub(t0), ok, step.next.Sub(t0))
		}
	}
	if stale := c.extend(a, []uint64{1}, t0.Add(5*ack)); !slices.Equal(stale, []uint64{1}) {
		t.Fatalf("extending an expired lease: stale %v", stale)
	}
}

// A delayed nack detaches the lease from its subscription (no longer its
// to settle, extend or lose on removal), and the lease ends at the delay,
// reported as delayed, its message settling to be requeued.
func TestDelayLeases(t *testing.T) {
	const ack, delay = 10 * time.Second, 4 * time.Second
	c, tags := newTestCore(t, 2)
	a := &testConsumer{name: "a", credit: 2}
	c.addSub(a)
	if got := describe(c.dispatch(t0, ack, tags)); !slices.Equal(got, []string{"a:0/1", "a:1/1"}) {
		t.Fatalf("dispatched %v", got)
	}
	detached, stale := c.delay(a, []uint64{1, 7}, t0.Add(delay))
	if !slices.Equal(detached, []uint64{1}) || !slices.Equal(stale, []uint64{7}) {
		t.Fatalf("delay: detached %v stale %v, want [1] [7]", detached, stale)
	}
	for _, tc := range []struct {
		name string
		op   func() []uint64 // stale tags
	}{
		{"delay again", func() []uint64 { _, s := c.delay(a, []uint64{1}, t0.Add(time.Hour)); return s }},
		{"extend", func() []uint64 { return c.extend(a, []uint64{1}, t0.Add(time.Hour)) }},
		{"settle", func() []uint64 { _, s := c.settle(a, []uint64{1}); return s }},
	} {
		if stale := tc.op(); !slices.Equal(stale, []uint64{1}) {
			t.Errorf("%s of a delayed tag: stale %v, want [1]", tc.name, stale)
		}
	}
	if ended := c.removeSub(a); !slices.Equal(leaseOffsets(ended), []uint64{1}) {
		t.Fatalf("removing a ended leases on %v, want only [1]", leaseOffsets(ended))
	}
	if m := c.st.msgs.get(0); m.status != msgLeased {
		t.Fatalf("delayed message is %d before its delay, want leased", m.status)
	}
	if next, ok := c.nextDeadline(); !ok || !next.Equal(t0.Add(delay)) {
		t.Fatalf("next deadline %v %v, want the delay", next.Sub(t0), ok)
	}
	if ended, delayed := c.expire(t0.Add(delay - time.Nanosecond)); len(ended)+len(delayed) != 0 {
		t.Fatalf("ended before the delay: %v %v", leaseOffsets(ended), leaseOffsets(delayed))
	}
	ended, delayed := c.expire(t0.Add(delay))
	if len(ended) != 0 || !slices.Equal(leaseOffsets(delayed), []uint64{0}) || !delayed[0].delayed {
		t.Fatalf("at the delay: expired %v delayed %v", leaseOffsets(ended), leaseOffsets(delayed))
	}
	if m := c.st.msgs.get(0); m.status != msgSettling {
		t.Fatalf("delayed message is %d at its delay, want settling", m.status)
	}
	if eff := applyRecord(t, c.st, recRelease, encodeSettle(0), 0); eff != effectReady || c.st.msgs.get(0).deliveries != 1 {
		t.Fatalf("requeue applied: effect %d, deliveries %d", eff, c.st.msgs.get(0).deliveries)
	}
}

// Removing a subscription returns what it held to ready without counting a
// delivery, leaves other subscriptions' leases alone, and takes it out of
// the rotation.
func TestRemoveSubReturnsItsLeases(t *testing.T) {
	c, tags := newTestCore(t, 4)
	a, b := &testConsumer{name: "a", credit: 2}, &testConsumer{name: "b", credit: 2}
	c.addSub(a)
	c.addSub(b)
	if got := describe(c.dispatch(t0, time.Second, tags)); !slices.Equal(got, []string{"a:0/1", "b:1/1", "a:2/1", "b:3/1"}) {
		t.Fatalf("dispatched %v", got)
	}
	ended := c.removeSub(a)
	offs := leaseOffsets(ended)
	slices.Sort(offs)
	if !slices.Equal(offs, []uint64{0, 2}) {
		t.Fatalf("removing a ended leases on %v, want [0 2]", offs)
	}
	for _, l := range ended {
		if l.sub != a {
			t.Errorf("lease %d of %s ended with a", l.tag, l.sub.name)
		}
	}
	if len(c.leases) != 2 || len(c.subs) != 1 || c.subs[0] != b {
		t.Fatalf("after removing a: %d leases, subscriptions %v", len(c.leases), c.subs)
	}
	if ended := c.removeSub(a); len(ended) != 0 || len(c.subs) != 1 {
		t.Fatalf("removing a twice ended %d leases", len(ended))
	}
	b.credit = 3
	if got := describe(c.dispatch(t0, time.Second, tags)); !slices.Equal(got, []string{"b:0/1", "b:2/1"}) {
		t.Fatalf("after removal dispatched %v, want a's messages to b, first delivery again", got)
	}
}

// A quarantined range takes its messages and the leases on them.
func TestDropRange(t *testing.T) {
	c, tags := newTestCore(t, 6)
	a := &testConsumer{name: "a", credit: 3}
	c.addSub(a)
	c.dispatch(t0, time.Second, tags) // leases on 0, 1, 2
	// Tag 2, on offset 1, is delayed: it holds no credit any more.
	if _, stale := c.delay(a, []uint64{2}, t0.Add(time.Hour)); len(stale) != 0 {
		t.Fatalf("delay: stale %v", stale)
	}
	ended, lost := c.dropRange(1, 4)
	offs := leaseOffsets(ended)
	slices.Sort(offs)
	if !slices.Equal(offs, []uint64{1, 2}) || lost != 3 {
		t.Fatalf("dropped leases on %v and %d messages, want [1 2] and 3", offs, lost)
	}
	for _, l := range ended { // the shell gives back only what is not delayed
		if l.delayed != (l.offset == 1) {
			t.Errorf("dropped lease on %d: delayed %v", l.offset, l.delayed)
		}
	}
	if len(c.leases) != 1 || len(c.expiry) != 1 || c.st.count != 3 {
		t.Fatalf("after the drop: %d leases, %d in expiry, %d messages", len(c.leases), len(c.expiry), c.st.count)
	}
	a.credit = 5
	if got := describe(c.dispatch(t0, time.Second, tags)); !slices.Equal(got, []string{"a:4/1", "a:5/1"}) {
		t.Fatalf("after the drop dispatched %v", got)
	}
}

// A partition with nothing ready reserves none of a subscription's
// credit, not even for a moment: the credit is shared with the
// subscription's other partitions, and one that found it reserved would
// sleep with a message ready and nothing to wake it (a stall until the
// next lease deadline, seen as a 30 s wait and a stale tag).
func TestDispatchWithNothingReadyTakesNoCredit(t *testing.T) {
	c, tags := newTestCore(t, 0)
	a := &testConsumer{name: "a", credit: 3}
	c.addSub(a)
	if ds := c.dispatch(t0, time.Second, tags); len(ds) != 0 {
		t.Fatalf("dispatched %v from an empty partition", describe(ds))
	}
	if a.taken != 0 || a.credit != 3 {
		t.Fatalf("an empty partition reserved credit %d times (credit now %d)", a.taken, a.credit)
	}
}
