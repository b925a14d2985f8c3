package appliance

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// The index answers as a map would, through puts and deletes in the
// orders a partition makes them (growing offsets, settled mostly in
// order, some held long) and in ones it does not (below the window, far
// beyond it), and walks in offset order.
func TestMsgIndexAgreesWithAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var x msgIndex
	want := map[uint64]*message{}
	next := uint64(1000)
	check := func(step int) {
		t.Helper()
		if x.len() != len(want) {
			t.Fatalf("step %d: len %d, want %d", step, x.len(), len(want))
		}
		var offs []uint64
		for off, m := range want {
			if x.get(off) != m {
				t.Fatalf("step %d: get(%d) = %p, want %p", step, off, x.get(off), m)
			}
			offs = append(offs, off)
		}
		slices.Sort(offs)
		var walked []uint64
		x.each(func(m *message) bool { walked = append(walked, m.offset); return true })
		if !slices.Equal(walked, offs) {
			t.Fatalf("step %d: walk %v, want %v", step, walked, offs)
		}
		first := lowest(&x)
		if (first == nil) != (len(offs) == 0) || (first != nil && first.offset != offs[0]) {
			t.Fatalf("step %d: first %v, want the lowest of %v", step, first, offs)
		}
		if len(want) == 0 && x.pages != nil {
			t.Fatalf("step %d: empty, and still holds a window of %d pages", step, len(x.pages))
		}
		if len(x.pages) > 0 && (x.pages[0] == nil || x.pages[len(x.pages)-1] == nil) {
			t.Fatalf("step %d: a window with an empty page at an end", step)
		}
	}
	for step := range 20000 {
		switch r := rng.IntN(100); {
		case r < 45: // publish
			next += 1 + uint64(rng.IntN(3))
			if rng.IntN(200) == 0 {
				next += uint64(rng.IntN(100000)) // a long run of other records
			}
			m := &message{offset: next}
			x.put(m)
			want[next] = m
		case r < 48: // an offset below everything held, or in a hole
			off := uint64(rng.IntN(int(next)))
			m := &message{offset: off}
			x.put(m)
			want[off] = m
		case r < 93 && len(want) > 0: // settle, mostly the oldest
			off := next - uint64(rng.IntN(512))
			if rng.IntN(3) > 0 {
				off = lowest(&x).offset
			}
			x.delete(off)
			delete(want, off)
		case r < 95: // deleting what is not held changes nothing
			x.delete(next + 1 + uint64(rng.IntN(1000)))
		default:
			off := uint64(rng.IntN(int(next) + 1000))
			if got := x.get(off); got != want[off] {
				t.Fatalf("step %d: get(%d) = %v, want %v", step, off, got, want[off])
			}
		}
		if step%97 == 0 {
			check(step)
		}
	}
	check(-1)
	for off := range want {
		x.delete(off)
		delete(want, off)
	}
	check(-2)
}

// Restoring a snapshot holds every message it names, and the lowest one
// held follows settles.
func TestRestoredIndexSettles(t *testing.T) {
	snap := snapshot{Boundary: 5000}
	for off := uint64(10); off < 5000; off += 3 {
		snap.Messages = append(snap.Messages, message{offset: off, size: 1})
	}
	s := snap.restore()
	if s.msgs.len() != len(snap.Messages) || s.count != int64(len(snap.Messages)) {
		t.Fatalf("restored %d messages, counted %d, want %d", s.msgs.len(), s.count, len(snap.Messages))
	}
	if got := lowest(&s.msgs).offset; got != 10 {
		t.Fatalf("lowest held %d, want 10", got)
	}
	for _, m := range snap.Messages[:1000] {
		s.remove(s.msgs.get(m.offset))
	}
	if got, want := lowest(&s.msgs).offset, snap.Messages[1000].offset; got != want {
		t.Fatalf("lowest held after settles %d, want %d", got, want)
	}
	again := s.capture()
	if len(again.Messages) != len(snap.Messages)-1000 || again.Messages[0].offset != snap.Messages[1000].offset {
		t.Fatalf("capture holds %d messages from %d", len(again.Messages), again.Messages[0].offset)
	}
}

// dropRange removes exactly the messages in [from, to), with from inside
// a page and to past the window, and a capture after a put below the
// window is still in offset order.
func TestIndexRangesAndOrder(t *testing.T) {
	s := newPartitionState(0)
	for off := uint64(300); off < 1300; off += 7 {
		s.add(&message{offset: off, size: 1})
	}
	s.add(&message{offset: 5, size: 1}) // below the window: it grows down
	before := s.msgs.len()
	var inRange int64
	s.msgs.each(func(m *message) bool {
		if m.offset >= 600 {
			inRange++
		}
		return true
	})
	if lost := s.dropRange(600, 5000); lost != inRange || int64(s.msgs.len()) != int64(before)-inRange {
		t.Fatalf("dropRange removed %d, want %d; %d left of %d", lost, inRange, s.msgs.len(), before)
	}
	snap := s.capture()
	if !slices.IsSortedFunc(snap.Messages, func(a, b message) int { return int(a.offset) - int(b.offset) }) ||
		snap.Messages[0].offset != 5 || snap.Messages[len(snap.Messages)-1].offset >= 600 {
		t.Fatalf("capture not in order or not the rest: first %d, last %d", snap.Messages[0].offset, snap.Messages[len(snap.Messages)-1].offset)
	}
}

// lowest is the first message of a walk: the one with the lowest offset.
func lowest(x *msgIndex) *message {
	var low *message
	x.each(func(m *message) bool { low = m; return false })
	return low
}
