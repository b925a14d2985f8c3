package appliance

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Every settle path: ack, nack with and without requeue, dead letters under
// the dead-letter queue's own mode, lease expiry, max deliveries, prefetch
// and credit, stale tags, overflow policies and publisher dedupe.

func TestAck(t *testing.T) {
	ctx := testCtx(t)
	fs := vfs.NewMem()
	b := openBroker(t, fs, "data", Options{Logger: quietLogger()})
	declare(t, ctx, b, QueueConfig{Name: "q"})
	for i := range 3 {
		publish(t, ctx, b, "q", Message{Body: body(i)})
	}
	sub, c := subscribe(t, b, "q", 10)
	for i := range 3 {
		d := c.next(t, ctx)
		if string(d.Body) != string(body(i)) || d.Deliveries != 1 || d.Offset != uint64(i) {
			t.Fatalf("delivery %d: %q offset %d deliveries %d", i, d.Body, d.Offset, d.Deliveries)
		}
		if err := sub.Ack(d.Tag); err != nil {
			t.Fatal(err)
		}
		if err := sub.Ack(d.Tag); !errors.Is(err, ErrStaleTag) {
			t.Fatalf("second ack of %d: %v, want ErrStaleTag", d.Tag, err)
		}
	}
	waitFor(t, ctx, "acks applied", func() bool { return info(t, b, "q").Messages == 0 })
	if sub.Held() != 0 {
		t.Fatalf("subscription holds %d after acking everything", sub.Held())
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openBroker(t, fs, "data", Options{Logger: quietLogger()})
	defer b.Close()
	if in := info(t, b, "q"); in.Messages != 0 {
		t.Fatalf("%d messages came back after their acks", in.Messages)
	}
}

func TestNackRequeueRedelivers(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{Logger: quietLogger()})
	defer b.Close()
	declare(t, ctx, b, QueueConfig{Name: "q"})
	publish(t, ctx, b, "q", Message{ID: "m1", Headers: []Header{{Key: "k", Value: "v"}}, Body: body(7)})
	sub, c := subscribe(t, b, "q", 1)
	tags := map[uint64]bool{}
	for want := uint32(1); want <= 4; want++ {
		d := c.next(t, ctx)
		if d.Deliveries != want || d.Offset != 0 || string(d.Body) != string(body(7)) || d.MessageID != "m1" ||
			len(d.Headers) != 1 || d.Headers[0] != (Header{Key: "k", Value: "v"}) {
			t.Fatalf("delivery %d: %+v", want, d)
		}
		if tags[d.Tag] {
			t.Fatalf("tag %d reused for a redelivery", d.Tag)
		}
		tags[d.Tag] = true
		if want == 4 {
			if err := sub.Ack(d.Tag); err != nil {
				t.Fatal(err)
			}
			break
		}
		if err := sub.Nack(true, d.Tag); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, "the ack applied", func() bool { return info(t, b, "q").Messages == 0 })
}

func TestNackDiscard(t *testing.T) {
	ctx := testCtx(t)
	fs := vfs.NewMem()
	b := openBroker(t, fs, "data", Options{Logger: quietLogger()})
	declare(t, ctx, b, QueueConfig{Name: "q"})
	publish(t, ctx, b, "q", Message{Body: body(1)})
	publish(t, ctx, b, "q", Message{Body: body(2)})
	sub, c := subscribe(t, b, "q", 1)
	d := c.next(t, ctx)
	if err := sub.Nack(false, d.Tag); err != nil {
		t.Fatal(err)
	}
	if d2 := c.next(t, ctx); string(d2.Body) != string(body(2)) {
		t.Fatalf("after the discard got %q", d2.Body)
	}
	waitFor(t, ctx, "the discard applied", func() bool { return info(t, b, "q").Messages == 1 })
	if in := info(t, b, "q"); in.Counters.Discarded != 1 {
		t.Fatalf("discarded counter %d", in.Counters.Discarded)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openBroker(t, fs, "data", Options{Logger: quietLogger()})
	defer b.Close()
	_, c = subscribe(t, b, "q", 10)
	if d := c.next(t, ctx); string(d.Body) != string(body(2)) {
		t.Fatalf("after restart got %q, want only the message not discarded", d.Body)
	}
	if in := info(t, b, "q"); in.Messages != 1 {
		t.Fatalf("after restart %d messages", in.Messages)
	}
}

// TestNackDeadLetterUnderItsOwnMode sends a durable queue's rejected message
// to a buffered dead-letter queue with every segment sync held: the copy is
// confirmed and delivered from the dead-letter queue at once, since it is
// buffered, while the source's own dead-letter marker waits for its sync.
func TestNackDeadLetterUnderItsOwnMode(t *testing.T) {
	ctx := testCtx(t)
	probe, fs := newSyncProbe(vfs.NewMem())
	b := openBroker(t, fs, "data", Options{Logger: quietLogger()})
	defer b.Close()
	defer probe.Open()
	s := DefaultSettings()
	s.BackgroundSyncIntervalMs = 0
	if err := b.UpdateSettings(s); err != nil {
		t.Fatal(err)
	}
	declare(t, ctx, b, QueueConfig{Name: "dlq", Durability: Buffered})
	declare(t, ctx, b, QueueConfig{Name: "src", Durability: Durable, DeadLetter: "dlq"})
	publish(t, ctx, b, "src", Message{ID: "order-1", Headers: []Header{{Key: "tenant", Value: "a"}}, Body: []byte("payload")})
	sub, c := subscribe(t, b, "src", 10)
	_, dc := subscribe(t, b, "dlq", 10)
	d := c.next(t, ctx)

	probe.Shut()
	if err := sub.Nack(false, d.Tag); err != nil {
		t.Fatal(err)
	}
	dd := dc.next(t, ctx)
	if string(dd.Body) != "payload" || dd.Queue != "dlq" || dd.Deliveries != 1 || dd.MessageID != "order-1" {
		t.Fatalf("dead letter %+v", dd)
	}
	want := []Header{
		{Key: "tenant", Value: "a"},
		{Key: "fibril-dead-letter-reason", Value: "rejected"},
		{Key: "fibril-dead-letter-queue", Value: "src"},
		{Key: "fibril-dead-letter-offset", Value: "0/0"},
	}
	if !slices.Equal(dd.Headers, want) {
		t.Fatalf("dead-letter headers %v, want %v", dd.Headers, want)
	}
	// The counter follows the confirm, which may trail the delivery.
	waitFor(t, ctx, "the copy counted", func() bool { return info(t, b, "dlq").Counters.Published == 1 })
	dlq := info(t, b, "dlq")
	if dlq.Config.Durability != Buffered || dlq.Messages != 1 ||
		dlq.Partitions[0].DurableNext != 0 || dlq.Partitions[0].WrittenNext != 1 {
		t.Fatalf("dead-letter queue with syncs held: %+v", dlq)
	}
	// The source's marker is durable: it waits for the sync.
	select {
	case <-probe.Held:
	case <-ctx.Done():
		t.Fatal("the dead-letter marker never asked for a sync")
	}
	if src := info(t, b, "src"); src.Messages != 1 || src.InFlight != 1 {
		t.Fatalf("source settled before its marker was synced: %d messages, %d in flight", src.Messages, src.InFlight)
	}
	probe.Open()
	waitFor(t, ctx, "the marker applied", func() bool { return info(t, b, "src").Messages == 0 })
	src := info(t, b, "src")
	if src.Counters.DeadLettered != 1 || src.Counters.Discarded != 0 {
		t.Fatalf("source counters %+v", src.Counters)
	}
}

// TestLeaseExpiryRedelivers covers the wiring of a real expiry: the
// dispatcher's timer fires, the expiry is appended and applied, and the
// message goes out again. When leases expire and what expiry does to them
// is decided by the dispatch core and tested there at exact instants
// (lease_test.go).
func TestLeaseExpiryRedelivers(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{Logger: quietLogger()})
	defer b.Close()
	declare(t, ctx, b, QueueConfig{Name: "q", AckDeadline: 50 * time.Millisecond})
	publish(t, ctx, b, "q", Message{Body: body(1)})
	sub, c := subscribe(t, b, "q", 1)
	first := c.next(t, ctx)
	if first.Deliveries != 1 {
		t.Fatalf("first delivery count %d", first.Deliveries)
	}
	second := c.next(t, ctx) // after the deadline passed
	if second.Deliveries != 2 || second.Offset != first.Offset || second.Tag == first.Tag {
		t.Fatalf("redelivery %+v after %+v", second, first)
	}
	if err := sub.Ack(first.Tag); !errors.Is(err, ErrStaleTag) {
		t.Fatalf("ack of the expired tag: %v, want ErrStaleTag", err)
	}
	if err := sub.Ack(second.Tag); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the ack applied", func() bool { return info(t, b, "q").Messages == 0 })
	if in := info(t, b, "q"); in.Counters.Expired != 1 {
		t.Fatalf("expired counter %d", in.Counters.Expired)
	}
}

// TestMaxDeliveries ends deliveries by nack; that expiry counts towards
// max deliveries the same way is tested on the core at exact instants
// (TestExpiryRedeliversUpToMaxDeliveries).
func TestMaxDeliveries(t *testing.T) {
	for _, tc := range []struct {
		name string
		dlq  string
	}{
		{name: "nack to dead letter", dlq: "dead"},
		{name: "nack without dead letter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			b := openBroker(t, vfs.NewMem(), "data", Options{Logger: quietLogger()})
			defer b.Close()
			declare(t, ctx, b, QueueConfig{Name: "q", MaxDeliveries: 3, DeadLetter: tc.dlq})
			publish(t, ctx, b, "q", Message{Body: []byte("poison")})
			sub, c := subscribe(t, b, "q", 1)
			for want := uint32(1); want <= 3; want++ {
				d := c.next(t, ctx)
				if string(d.Body) != "poison" || d.Deliveries != want {
					t.Fatalf("delivery %d: %q deliveries %d", want, d.Body, d.Deliveries)
				}
				if err := sub.Nack(true, d.Tag); err != nil {
					t.Fatal(err)
				}
			}
			// The third delivery ended: the poison message leaves.
			waitFor(t, ctx, "the poison message settled", func() bool { return info(t, b, "q").Messages == 0 })
			if !c.empty() {
				t.Fatalf("delivered again after max deliveries: %+v", <-c.ch)
			}
			in := info(t, b, "q")
			if tc.dlq == "" {
				if in.Counters.Discarded != 1 || in.Counters.DeadLettered != 0 {
					t.Fatalf("counters %+v", in.Counters)
				}
				return
			}
			if in.Counters.DeadLettered != 1 {
				t.Fatalf("counters %+v", in.Counters)
			}
			// The dead-letter queue did not exist: it was declared durable.
			dl := info(t, b, tc.dlq)
			if dl.Config.Durability != Durable || dl.Messages != 1 {
				t.Fatalf("dead-letter queue %+v", dl)
			}
			_, dc := subscribe(t, b, tc.dlq, 1)
			dd := dc.next(t, ctx)
			if string(dd.Body) != "poison" || headerValue(dd.Headers, "fibril-dead-letter-reason") != "max-deliveries" ||
				headerValue(dd.Headers, "fibril-dead-letter-queue") != "q" {
				t.Fatalf("dead letter %+v", dd)
			}
		})
	}
}

func headerValue(hs []Header, key string) string {
	for _, h := range hs {
		if h.Key == key {
			return h.Value
		}
	}
	return ""
}

func TestPrefetchAndCredit(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{Logger: quietLogger()})
	defer b.Close()
	declare(t, ctx, b, QueueConfig{Name: "q", Partitions: 2})
	const n = 40
	for i := range n {
		publish(t, ctx, b, "q", Message{Body: body(i)})
	}
	var (
		limit              atomic.Int64
		delivered, settled atomic.Int64
		over               atomic.Int64 // deliveries seen above the limit
	)
	limit.Store(3)
	ch := make(chan Delivery, n)
	sub, err := b.Subscribe("q", SubscribeOptions{Prefetch: 3, Deliver: func(d Delivery) {
		// settled is counted before each Ack call, so this never
		// overcounts what the subscription holds.
		if delivered.Add(1)-settled.Load() > limit.Load() {
			over.Add(1)
		}
		ch <- d
	}})
	if err != nil {
		t.Fatal(err)
	}
	next := func() Delivery {
		select {
		case d := <-ch:
			return d
		case <-ctx.Done():
			t.Fatal("no delivery")
			return Delivery{}
		}
	}
	var held []Delivery
	for range 3 {
		held = append(held, next())
	}
	if in := info(t, b, "q"); in.InFlight != 3 || sub.Held() != 3 {
		t.Fatalf("prefetch 3: %d in flight, %d held", in.InFlight, sub.Held())
	}
	limit.Store(5)
	sub.AddCredit(2)
	held = append(held, next(), next())
	if in := info(t, b, "q"); in.InFlight != 5 || sub.Held() != 5 {
		t.Fatalf("after AddCredit(2): %d in flight, %d held", in.InFlight, sub.Held())
	}
	sub.AddCredit(0)  // no-op
	sub.AddCredit(-4) // no-op
	seen := map[string]bool{}
	for len(seen) < n {
		d := held[0]
		held = held[1:]
		seen[string(d.Body)] = true
		settled.Add(1)
		if err := sub.Ack(d.Tag); err != nil {
			t.Fatal(err)
		}
		if len(seen)+len(held) < n {
			held = append(held, next())
		}
	}
	if over.Load() != 0 {
		t.Fatalf("%d deliveries beyond the credit", over.Load())
	}
	if h := sub.Held(); h != 0 {
		t.Fatalf("still held %d", h)
	}
}

func TestStaleTags(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{Logger: quietLogger()})
	defer b.Close()
	declare(t, ctx, b, QueueConfig{Name: "q"})
	publish(t, ctx, b, "q", Message{Body: body(1)})
	publish(t, ctx, b, "q", Message{Body: body(2)})
	subA, ca := subscribe(t, b, "q", 1)
	subB, cb := subscribe(t, b, "q", 1)
	da, db := ca.next(t, ctx), cb.next(t, ctx)

	// Unknown tags, and tags another subscription holds, are stale; the
	// tags that are good settle anyway.
	for _, tc := range []struct {
		name   string
		settle func() error
	}{
		{"unknown ack", func() error { return subA.Ack(1 << 60) }},
		{"unknown nack", func() error { return subA.Nack(true, 1<<60) }},
		{"unknown discard", func() error { return subA.Nack(false, 1<<60) }},
		{"other's ack", func() error { return subA.Ack(db.Tag) }},
		{"other's nack", func() error { return subB.Nack(false, da.Tag) }},
		{"no tags", func() error { return subA.Ack() }},
	} {
		err := tc.settle()
		if tc.name == "no tags" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		var se *StaleTagsError
		if !errors.Is(err, ErrStaleTag) || !errors.As(err, &se) || len(se.Tags) != 1 {
			t.Errorf("%s: %v, want one stale tag", tc.name, err)
		}
	}
	if subA.Held() != 1 || subB.Held() != 1 || info(t, b, "q").InFlight != 2 {
		t.Fatalf("stale settles changed leases: held %d %d", subA.Held(), subB.Held())
	}
	err := subA.Ack(da.Tag, 999_999_999, db.Tag)
	var se *StaleTagsError
	if !errors.As(err, &se) || !slices.Equal(se.Tags, []uint64{999_999_999, db.Tag}) {
		t.Fatalf("mixed ack: %v", err)
	}
	if err := subB.Ack(db.Tag); err != nil {
		t.Fatalf("the owner's ack after another's stale one: %v", err)
	}
	waitFor(t, ctx, "both acked", func() bool { return info(t, b, "q").Messages == 0 })

	// A closed subscription's tags are stale too.
	publish(t, ctx, b, "q", Message{Body: body(3)})
	var d Delivery
	var owner *Subscription
	select {
	case d = <-ca.ch:
		owner = subA
	case d = <-cb.ch:
		owner = subB
	case <-ctx.Done():
		t.Fatal("no delivery")
	}
	owner.Close()
	if err := owner.Ack(d.Tag); !errors.Is(err, ErrStaleTag) {
		t.Fatalf("ack after close: %v", err)
	}
}

func TestOverflowReject(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{Logger: quietLogger()})
	defer b.Close()
	declare(t, ctx, b, QueueConfig{Name: "count", MaxMessages: 3})
	declare(t, ctx, b, QueueConfig{Name: "bytes", MaxBytes: 100, Overflow: OverflowReject})
	for i := range 3 {
		publish(t, ctx, b, "count", Message{Body: body(i)})
	}
	for range 2 {
		if _, err := b.Publish(ctx, "count", Message{Body: body(9)}); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("publish past max messages: %v, want ErrQueueFull", err)
		}
	}
	in := info(t, b, "count")
	if in.Messages != 3 || in.Counters.RejectedFull != 2 || in.Counters.Published != 3 {
		t.Fatalf("after rejects: %d messages, counters %+v", in.Messages, in.Counters)
	}
	// Room comes back once a message is settled.
	sub, c := subscribe(t, b, "count", 1)
	if err := sub.Ack(c.next(t, ctx).Tag); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the ack applied", func() bool { return info(t, b, "count").Messages == 2 })
	publish(t, ctx, b, "count", Message{Body: body(3)})

	publish(t, ctx, b, "bytes", Message{Body: make([]byte, 60)})
	if _, err := b.Publish(ctx, "bytes", Message{Body: make([]byte, 41)}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("publish past max bytes: %v", err)
	}
	publish(t, ctx, b, "bytes", Message{Body: make([]byte, 40)})
	if in := info(t, b, "bytes"); in.Bytes != 100 || in.Counters.RejectedFull != 1 {
		t.Fatalf("bytes queue: %d bytes, counters %+v", in.Bytes, in.Counters)
	}
}

func TestOverflowDropOldest(t *testing.T) {
	ctx := testCtx(t)
	fs := vfs.NewMem()
	b := openBroker(t, fs, "data", Options{Logger: quietLogger()})
	declare(t, ctx, b, QueueConfig{Name: "q", MaxMessages: 3, Overflow: OverflowDropOldest})
	for i := range 5 {
		if c := publish(t, ctx, b, "q", Message{Body: body(i)}); c.Duplicate {
			t.Fatalf("confirm %+v", c)
		}
	}
	in := info(t, b, "q")
	if in.Messages != 3 || in.Counters.DroppedOverflow != 2 || in.Counters.RejectedFull != 0 {
		t.Fatalf("after drops: %d messages, counters %+v", in.Messages, in.Counters)
	}
	// A leased message is not ready, so it is not the one dropped.
	sub, c := subscribe(t, b, "q", 1)
	leased := c.next(t, ctx)
	if string(leased.Body) != string(body(2)) {
		t.Fatalf("oldest left %q, want message 2", leased.Body)
	}
	publish(t, ctx, b, "q", Message{Body: body(5)})
	if err := sub.Ack(leased.Tag); err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 2 {
		d := c.next(t, ctx)
		got = append(got, string(d.Body))
		if err := sub.Ack(d.Tag); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{string(body(4)), string(body(5))}; !slices.Equal(got, want) {
		t.Fatalf("delivered %q, want %q (message 3 dropped, 2 kept while leased)", got, want)
	}
	waitFor(t, ctx, "acks applied", func() bool { return info(t, b, "q").Messages == 0 })
	if in := info(t, b, "q"); in.Counters.DroppedOverflow != 3 {
		t.Fatalf("dropped counter %d", in.Counters.DroppedOverflow)
	}
	// The drops are in the log: none comes back after a restart.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openBroker(t, fs, "data", Options{Logger: quietLogger()})
	defer b.Close()
	if in := info(t, b, "q"); in.Messages != 0 {
		t.Fatalf("%d messages after restart", in.Messages)
	}
}

func TestDedupe(t *testing.T) {
	ctx := testCtx(t)
	fs := vfs.NewCrashableMem()
	b := openBroker(t, fs, "data", Options{Logger: quietLogger()})
	const window = time.Minute
	declare(t, ctx, b, QueueConfig{Name: "q", DedupeWindow: window})

	first := publish(t, ctx, b, "q", Message{ID: "a", Body: []byte("one")})
	again := publish(t, ctx, b, "q", Message{ID: "a", Body: []byte("other body, same id")})
	if first.Duplicate || !again.Duplicate || again.Offset != first.Offset || again.Partition != first.Partition {
		t.Fatalf("first %+v, again %+v", first, again)
	}
	other := publish(t, ctx, b, "q", Message{ID: "b", Body: []byte("two")})
	if other.Duplicate || other.Offset == first.Offset {
		t.Fatalf("another id: %+v", other)
	}
	noID := publish(t, ctx, b, "q", Message{Body: []byte("no id")})
	noID2 := publish(t, ctx, b, "q", Message{Body: []byte("no id")})
	if noID.Duplicate || noID2.Duplicate {
		t.Fatal("publishes without an id were deduplicated")
	}
	in := info(t, b, "q")
	if in.Messages != 4 || in.Counters.Duplicates != 1 || in.Counters.Published != 4 {
		t.Fatalf("after duplicates: %d messages, counters %+v", in.Messages, in.Counters)
	}

	// Concurrent publishes of one id store it once.
	var wg sync.WaitGroup
	var fresh atomic.Int64
	offsets := make(chan uint64, 16)
	for range 16 {
		wg.Go(func() {
			c, err := b.Publish(ctx, "q", Message{ID: "c", Body: []byte("three")})
			if err != nil {
				t.Error(err)
				return
			}
			if !c.Duplicate {
				fresh.Add(1)
			}
			offsets <- c.Offset
		})
	}
	wg.Wait()
	close(offsets)
	if fresh.Load() != 1 {
		t.Fatalf("%d concurrent publishes of one id were stored", fresh.Load())
	}
	var off0 *uint64
	for o := range offsets {
		if off0 != nil && o != *off0 {
			t.Fatalf("duplicates confirmed at offsets %d and %d", *off0, o)
		}
		off0 = &o
	}

	// The window survives a clean restart (snapshot)...
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openBroker(t, fs, "data", Options{Logger: quietLogger()})
	if c := publish(t, ctx, b, "q", Message{ID: "b", Body: []byte("two")}); !c.Duplicate || c.Offset != other.Offset {
		t.Fatalf("after restart, republish of b: %+v (first at %d)", c, other.Offset)
	}
	// ...and a crash (replay of the log after the snapshot).
	publish(t, ctx, b, "q", Message{ID: "d", Body: []byte("four")})
	crashed := crashClone(t, b, fs)
	b = openBroker(t, crashed, "data", Options{Logger: quietLogger()})
	defer b.Close()
	for _, id := range []string{"b", "c", "d"} {
		if c := publish(t, ctx, b, "q", Message{ID: id, Body: []byte(id)}); !c.Duplicate {
			t.Fatalf("after crash, republish of %s: %+v", id, c)
		}
	}
	if in := info(t, b, "q"); in.Messages != 6 || in.Counters.Duplicates != 3 {
		t.Fatalf("after crash: %d messages, counters %+v", in.Messages, in.Counters)
	}

	// Outside the window the id is new again. The queue takes the time
	// as an argument, so no test waits a minute.
	q, err := b.queue("q")
	if err != nil {
		t.Fatal(err)
	}
	later := make(chan Confirm, 1)
	q.publish(Message{ID: "a", Body: []byte("one, later")}, time.Now().Add(window+time.Second), func(c Confirm, err error) {
		if err != nil {
			t.Error(err)
		}
		later <- c
	}, nil)
	if c := <-later; c.Duplicate || c.Offset == first.Offset {
		t.Fatalf("publish outside the window: %+v", c)
	}
	if in := info(t, b, "q"); in.Messages != 7 {
		t.Fatalf("%d messages, want 7", in.Messages)
	}
}

// crashClone takes what a process crash leaves of a running broker on a
// MemFS (the page cache survives: every written byte is kept), then closes
// the broker on the original file system.
func crashClone(t testing.TB, b *Broker, fs vfs.FS) vfs.FS {
	t.Helper()
	mem, ok := fs.(*vfs.MemFS)
	if !ok {
		t.Fatalf("crashClone needs a crashable MemFS, got %T", fs)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 2))})
	if err := b.Close(); err != nil {
		t.Fatalf("close after the clone: %v", err)
	}
	return crashed
}

// TestDeadLetterKeepsTheMessage: a message that exhausts its deliveries
// reaches the dead-letter queue with its id, its headers and its key (so
// it lands on the partition its key picks there), plus why it went.
func TestDeadLetterKeepsTheMessage(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{Logger: quietLogger()})
	defer b.Close()
	declare(t, ctx, b, QueueConfig{Name: "q", Partitions: 3, MaxDeliveries: 1, DeadLetter: "dead"})
	declare(t, ctx, b, QueueConfig{Name: "dead", Partitions: 5})
	headers := []Header{{Key: "trace", Value: "t-1"}, {Key: "site", Value: "7"}}
	publish(t, ctx, b, "q", Message{ID: "m-1", Key: "device-42", Headers: headers, Body: []byte("poison")})
	sub, c := subscribe(t, b, "q", 1)
	d := c.next(t, ctx)
	if d.MessageID != "m-1" || d.Key != "device-42" {
		t.Fatalf("delivery from q: id %q key %q", d.MessageID, d.Key)
	}
	if err := sub.Nack(true, d.Tag); err != nil { // its one delivery: on to the dead-letter queue
		t.Fatal(err)
	}
	_, dc := subscribe(t, b, "dead", 1)
	dd := dc.next(t, ctx)
	if dd.MessageID != "m-1" || dd.Key != "device-42" || string(dd.Body) != "poison" {
		t.Fatalf("dead letter: id %q key %q body %q", dd.MessageID, dd.Key, dd.Body)
	}
	for _, h := range headers {
		if got := headerValue(dd.Headers, h.Key); got != h.Value {
			t.Fatalf("dead letter header %s = %q, want %q (headers %v)", h.Key, got, h.Value, dd.Headers)
		}
	}
	if got := headerValue(dd.Headers, "fibril-dead-letter-reason"); got != "max-deliveries" {
		t.Fatalf("dead letter reason %q (headers %v)", got, dd.Headers)
	}
	// The key picked the copy's partition, as it picks a publish's.
	if c := publish(t, ctx, b, "dead", Message{Key: "device-42", Body: []byte("probe")}); c.Partition != dd.Partition {
		t.Fatalf("dead letter on partition %d, the key picks %d", dd.Partition, c.Partition)
	}
}

// Queue info counts each delivery and what its consumer decided: a nack
// with requeue delivers the message again (a redelivery), an ack and a
// nack without requeue settle it.
func TestSettleCounters(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{Logger: quietLogger()})
	defer b.Close()
	declare(t, ctx, b, QueueConfig{Name: "q"})
	publish(t, ctx, b, "q", Message{Body: body(1)})
	sub, c := subscribe(t, b, "q", 1)
	d := c.next(t, ctx)
	if err := sub.Nack(true, d.Tag); err != nil { // requeue: delivered again
		t.Fatal(err)
	}
	d = c.next(t, ctx)
	if d.Deliveries != 2 {
		t.Fatalf("after a requeue the next delivery is a message's delivery %d, want its second", d.Deliveries)
	}
	if err := sub.Ack(d.Tag); err != nil {
		t.Fatal(err)
	}
	publish(t, ctx, b, "q", Message{Body: body(2)})
	d = c.next(t, ctx)
	if err := sub.Nack(false, d.Tag); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "both settled", func() bool { return info(t, b, "q").Messages == 0 })
	got := info(t, b, "q").Counters
	want := QueueCounters{Delivered: 3, Redelivered: 1, Acked: 1, Requeued: 1, Rejected: 1}
	if got.Delivered != want.Delivered || got.Redelivered != want.Redelivered || got.Acked != want.Acked ||
		got.Requeued != want.Requeued || got.Rejected != want.Rejected {
		t.Fatalf("counters %+v, want delivered 3, redelivered 1, acked 1, requeued 1, rejected 1", got)
	}
}

// A consumer slower than the ack deadline keeps its message by extending
// the lease: the ack long after the first deadline still applies, and the
// message was never delivered again.
func TestExtendKeepsTheLease(t *testing.T) {
	const ackDeadline = 300 * time.Millisecond
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{Logger: quietLogger()})
	defer b.Close()
	declare(t, ctx, b, QueueConfig{Name: "q", AckDeadline: ackDeadline})
	publish(t, ctx, b, "q", Message{Body: body(1)})
	sub, c := subscribe(t, b, "q", 1)
	d := c.next(t, ctx)
	start := time.Now()
	for range 4 {
		time.Sleep(ackDeadline / 2) // the handler's work, not a wait for an event
		if err := sub.Extend(d.Tag); err != nil {
			t.Fatalf("extend after %v: %v", time.Since(start), err)
		}
	}
	time.Sleep(ackDeadline / 2)
	if held := time.Since(start); held <= ackDeadline {
		t.Fatalf("held only %v, not past the deadline of %v", held, ackDeadline)
	}
	if err := sub.Ack(d.Tag); err != nil {
		t.Fatalf("ack after %v of extensions: %v", time.Since(start), err)
	}
	in := quiet(t, ctx, b, "q")
	if in.Messages != 0 || in.Counters.Expired != 0 || !c.empty() {
		t.Fatalf("after the ack: %d messages, %d expired, redelivered %v", in.Messages, in.Counters.Expired, !c.empty())
	}
	if err := sub.Extend(d.Tag, 1<<60); !errors.Is(err, ErrStaleTag) {
		t.Fatalf("extend of a settled and an unknown tag: %v, want ErrStaleTag", err)
	}
	var se *StaleTagsError
	if err := sub.Extend(d.Tag, 1<<60); !errors.As(err, &se) || len(se.Tags) != 2 {
		t.Fatalf("extend of two stale tags: %v", err)
	}
}

// A delayed nack gives the subscription its credit back at once, so other
// messages come meanwhile, and requeues the message only after the delay,
// as a nack would: one more delivery, counted as requeued, not expired. A
// subscription that closes meanwhile does not bring it back early.
func TestNackDelay(t *testing.T) {
	const delay = 500 * time.Millisecond
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{Logger: quietLogger()})
	defer b.Close()
	declare(t, ctx, b, QueueConfig{Name: "q"})
	for i := range 2 {
		publish(t, ctx, b, "q", Message{Body: body(i)})
	}
	sub, c := subscribe(t, b, "q", 1)
	first := c.next(t, ctx)
	nackedAt := time.Now()
	if err := sub.NackDelay(delay, first.Tag); err != nil {
		t.Fatal(err)
	}
	if held := sub.Held(); held != 0 {
		t.Fatalf("holds %d after a delayed nack", held)
	}
	for _, tc := range []struct {
		name   string
		settle func() error
	}{
		{"ack", func() error { return sub.Ack(first.Tag) }},
		{"nack", func() error { return sub.Nack(true, first.Tag) }},
		{"delayed nack", func() error { return sub.NackDelay(delay, first.Tag) }},
		{"extend", func() error { return sub.Extend(first.Tag) }},
		{"unknown delayed nack", func() error { return sub.NackDelay(delay, 1<<60) }},
	} {
		if err := tc.settle(); !errors.Is(err, ErrStaleTag) {
			t.Errorf("%s of a delayed tag: %v, want ErrStaleTag", tc.name, err)
		}
	}
	second := c.next(t, ctx) // the credit came back
	if second.Offset == first.Offset || second.Deliveries != 1 {
		t.Fatalf("meanwhile delivered %+v, want the other message", second)
	}
	if err := sub.Ack(second.Tag); err != nil {
		t.Fatal(err)
	}
	sub.Close()
	_, c2 := subscribe(t, b, "q", 1)
	again := c2.next(t, ctx)
	if waited := time.Since(nackedAt); waited < delay {
		t.Fatalf("redelivered after %v, before the delay of %v", waited, delay)
	}
	if again.Offset != first.Offset || again.Deliveries != 2 {
		t.Fatalf("redelivery %+v after %+v", again, first)
	}
	if in := info(t, b, "q"); in.Counters.Requeued != 1 || in.Counters.Expired != 0 {
		t.Fatalf("requeued %d expired %d, want 1 0", in.Counters.Requeued, in.Counters.Expired)
	}
}

// A delayed requeue counts towards max deliveries as a requeue does.
func TestNackDelayMaxDeliveries(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{Logger: quietLogger()})
	defer b.Close()
	declare(t, ctx, b, QueueConfig{Name: "dlq"})
	declare(t, ctx, b, QueueConfig{Name: "q", MaxDeliveries: 2, DeadLetter: "dlq"})
	publish(t, ctx, b, "q", Message{Body: body(1)})
	sub, c := subscribe(t, b, "q", 1)
	for want := uint32(1); want <= 2; want++ {
		d := c.next(t, ctx)
		if d.Deliveries != want {
			t.Fatalf("delivery %d counted %d", want, d.Deliveries)
		}
		if err := sub.NackDelay(10*time.Millisecond, d.Tag); err != nil {
			t.Fatal(err)
		}
	}
	_, dc := subscribe(t, b, "dlq", 1)
	if d := dc.next(t, ctx); string(d.Body) != string(body(1)) {
		t.Fatalf("dead letter %q", d.Body)
	}
	waitFor(t, ctx, "the message left q", func() bool { return info(t, b, "q").Messages == 0 })
	if !c.empty() {
		t.Fatal("delivered past max deliveries")
	}
}
