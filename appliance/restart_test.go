package appliance

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Restart from checkpoint plus replay gives exactly the state before it:
// the same unsettled messages with the same delivery counts, acked and
// discarded ones gone, in both modes, after a clean close and after a crash
// that skipped the closing checkpoint.

// msgState is what a restart must keep of one unsettled message.
type msgState struct {
	deliveries uint32
	size       int64
	id         string
	at         int64 // unix nanos
}

// partitionStates copies every partition's unsettled messages by offset.
func partitionStates(t testing.TB, b *Broker, name string) []map[uint64]msgState {
	t.Helper()
	q, err := b.queue(name)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]map[uint64]msgState, len(q.parts))
	for i, p := range q.parts {
		p.mu.Lock()
		out[i] = make(map[uint64]msgState, p.core.st.msgs.len())
		p.core.st.msgs.each(func(m *message) bool {
			off := m.offset
			out[i][off] = msgState{deliveries: m.deliveries, size: m.size, id: m.id, at: m.at.UnixNano()}
			return true
		})
		if int64(p.core.st.msgs.len()) != p.core.st.count {
			t.Errorf("partition %d counts %d messages and holds %d", i, p.core.st.count, p.core.st.msgs.len())
		}
		p.mu.Unlock()
	}
	return out
}

// bodyIndex reads back the index body(i) encoded.
func bodyIndex(t testing.TB, b []byte) int {
	t.Helper()
	i, err := strconv.Atoi(strings.TrimPrefix(string(b), "message-"))
	if err != nil {
		t.Fatalf("body %q: %v", b, err)
	}
	return i
}

func TestRestartKeepsState(t *testing.T) {
	for _, mode := range []Durability{Durable, Buffered} {
		for _, crash := range []bool{false, true} {
			name := mode.String() + "/close"
			if crash {
				name = mode.String() + "/checkpoint-then-crash"
			}
			t.Run(name, func(t *testing.T) { testRestartKeepsState(t, mode, crash) })
		}
	}
}

func testRestartKeepsState(t *testing.T, mode Durability, crash bool) {
	ctx := testCtx(t)
	fs := vfs.NewCrashableMem()
	opts := Options{Logger: quietLogger(), CheckpointDelay: time.Hour} // checkpoints only when the test says
	b := openBroker(t, fs, "data", opts)
	defer func() { b.Close() }()
	declare(t, ctx, b, QueueConfig{Name: "q", Durability: mode, Partitions: 2, DedupeWindow: time.Hour})
	const n = 40
	for i := range n {
		publish(t, ctx, b, "q", Message{ID: fmt.Sprint("id-", i), Body: body(i)})
	}
	gone := map[int]bool{} // acked or discarded

	// Phase A: every message delivered once; a fifth acked, a fifth
	// released, a fifth discarded, the rest held when the subscription
	// closes (which returns them without counting a delivery).
	subA, ca := subscribe(t, b, "q", n)
	for range n {
		d := ca.next(t, ctx)
		i := bodyIndex(t, d.Body)
		var err error
		switch i % 5 {
		case 0:
			err = subA.Ack(d.Tag)
			gone[i] = true
		case 1:
			err = subA.Nack(true, d.Tag)
		case 2:
			err = subA.Nack(false, d.Tag)
			gone[i] = true
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	subA.Close()
	quiet(t, ctx, b, "q")
	if crash {
		if err := b.Checkpoint(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// Phase B: leases that expire. A short deadline, a subscription that
	// never settles, closed once four redeliveries came back.
	declare(t, ctx, b, QueueConfig{Name: "q", AckDeadline: 50 * time.Millisecond})
	subB, cb := subscribe(t, b, "q", 4)
	firstSeen := map[[2]uint64]uint32{} // partition, offset -> count at its first delivery here
	for redelivered := 0; redelivered < 4; {
		d := cb.next(t, ctx)
		k := [2]uint64{uint64(d.Partition), d.Offset}
		if first, ok := firstSeen[k]; !ok {
			firstSeen[k] = d.Deliveries
		} else if d.Deliveries > first {
			redelivered++
		}
	}
	subB.Close()
	quiet(t, ctx, b, "q")

	// Phase C: more settles after the checkpoint.
	declare(t, ctx, b, QueueConfig{Name: "q", AckDeadline: 30 * time.Second})
	subC, cc := subscribe(t, b, "q", 3)
	ds := []Delivery{cc.next(t, ctx), cc.next(t, ctx), cc.next(t, ctx)}
	if err := subC.Ack(ds[0].Tag); err != nil {
		t.Fatal(err)
	}
	gone[bodyIndex(t, ds[0].Body)] = true
	if err := subC.Nack(true, ds[1].Tag); err != nil {
		t.Fatal(err)
	}
	if err := subC.Nack(false, ds[2].Tag); err != nil {
		t.Fatal(err)
	}
	gone[bodyIndex(t, ds[2].Body)] = true
	subC.Close()
	before := quiet(t, ctx, b, "q")
	if before.Messages != int64(n-len(gone)) {
		t.Fatalf("%d messages before the restart, want %d", before.Messages, n-len(gone))
	}
	if before.Counters.Expired < 4 {
		t.Fatalf("only %d leases expired", before.Counters.Expired)
	}
	want := partitionStates(t, b, "q")

	// The restart.
	if crash {
		fs = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(3, 4))})
		// A crash runs no closing checkpoint: the clone holds the
		// snapshot taken after phase A and the log after it.
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openBroker(t, fs, "data", opts)
	if errs := b.QueueErrors(); len(errs) != 0 {
		t.Fatalf("queue errors after restart: %v", errs)
	}
	got := partitionStates(t, b, "q")
	for i := range want {
		if !maps.Equal(got[i], want[i]) {
			t.Fatalf("partition %d after restart:\n got %v\nwant %v", i, got[i], want[i])
		}
	}
	after := info(t, b, "q")
	if after.Messages != before.Messages || after.Bytes != before.Bytes || after.Ready != before.Messages || after.InFlight != 0 {
		t.Fatalf("after restart %d messages %d bytes %d ready %d in flight; before %d messages %d bytes",
			after.Messages, after.Bytes, after.Ready, after.InFlight, before.Messages, before.Bytes)
	}

	// Every message that is left is delivered with its count, once; the
	// dedupe window still knows every id, settled or not.
	sub, c := subscribe(t, b, "q", n)
	for range after.Messages {
		d := c.next(t, ctx)
		i := bodyIndex(t, d.Body)
		if gone[i] {
			t.Fatalf("message %d came back after its ack or discard", i)
		}
		m, ok := want[d.Partition][d.Offset]
		if !ok || d.Deliveries != m.deliveries+1 || d.MessageID != fmt.Sprint("id-", i) {
			t.Fatalf("delivery %+v, state before the restart %+v (known %v)", d, m, ok)
		}
		if err := sub.Ack(d.Tag); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, "every message acked", func() bool { return info(t, b, "q").Messages == 0 })
	for i := range n {
		if c := publish(t, ctx, b, "q", Message{ID: fmt.Sprint("id-", i), Body: body(i)}); !c.Duplicate {
			t.Fatalf("id-%d not a duplicate after the restart", i)
		}
	}
}

// TestRestartDeadLettersOnce replays a log in which messages went past max
// deliveries and were dead-lettered: the replay must not copy them to the
// dead-letter queue again.
func TestRestartDeadLettersOnce(t *testing.T) {
	ctx := testCtx(t)
	fs := vfs.NewCrashableMem()
	opts := Options{Logger: quietLogger(), CheckpointDelay: time.Hour}
	b := openBroker(t, fs, "data", opts)
	declare(t, ctx, b, QueueConfig{Name: "dead"})
	declare(t, ctx, b, QueueConfig{Name: "q", MaxDeliveries: 2, DeadLetter: "dead"})
	const n = 3
	for i := range n {
		publish(t, ctx, b, "q", Message{Body: body(i)})
	}
	sub, c := subscribe(t, b, "q", n)
	for range 2 * n {
		if err := sub.Nack(true, c.next(t, ctx).Tag); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, "every message dead-lettered", func() bool {
		return info(t, b, "q").Messages == 0 && info(t, b, "dead").Messages == n
	})
	crashed := crashClone(t, b, fs)
	b = openBroker(t, crashed, "data", opts)
	defer b.Close()
	// The replay of q's log meets the releases that went past max
	// deliveries and then the dead-letter markers that settled them:
	// nothing is left to dead-letter.
	q, err := b.queue("q")
	if err != nil {
		t.Fatal(err)
	}
	snap, haveSnap, err := b.meta.snapshot("q", 0)
	if err != nil {
		t.Fatal(err)
	}
	r := &replayer{q: q, st: newPartitionState(0)}
	if haveSnap {
		r.st = snap.restore()
		r.addDedupe(snap.Dedupe...)
	}
	if err := b.rebuild(r, 0, q.parts[0].log, haveSnap, snap); err != nil {
		t.Fatal(err)
	}
	if len(r.over) != 0 || r.st.msgs.len() != 0 {
		t.Fatalf("replay finds %v to dead-letter again, %d messages", r.over, r.st.msgs.len())
	}
	if q, d := info(t, b, "q").Messages, info(t, b, "dead").Messages; q != 0 || d != n {
		t.Fatalf("after replay: %d messages in q, %d dead letters, want 0 and %d", q, d, n)
	}
}
