package appliance

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// dedupeID is id i padded to size bytes.
func dedupeID(i, size int) string {
	s := fmt.Sprintf("id-%06d-", i)
	return s + strings.Repeat("x", max(size-len(s), 0))
}

// checkDuplicates publishes ids [from, to) again and fails unless each is
// a duplicate (want true) or stored anew (want false).
func checkDuplicates(t *testing.T, ctx context.Context, b *Broker, queue string, from, to, size int, want bool) {
	t.Helper()
	for i := from; i < to; i++ {
		c := publish(t, ctx, b, queue, Message{ID: dedupeID(i, size), Body: []byte("again")})
		if c.Duplicate != want {
			t.Fatalf("republish of id %d: duplicate %v, want %v", i, c.Duplicate, want)
		}
	}
}

// Past DedupeMaxEntries a partition forgets its oldest ids early: every
// publish is still confirmed, the newest N stay duplicates, the evicted
// ones are stored again, and the evictions are counted.
func TestDedupeEntryBoundEvictsOldest(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{Logger: quietLogger()})
	defer b.Close()
	const bound, n = 100, 150
	declare(t, ctx, b, QueueConfig{Name: "q", DedupeWindow: time.Hour, DedupeMaxEntries: bound})
	for i := range n {
		if c := publish(t, ctx, b, "q", Message{ID: dedupeID(i, 8), Body: []byte("one")}); c.Duplicate {
			t.Fatalf("first publish of id %d is a duplicate", i)
		}
	}
	in := info(t, b, "q")
	if in.Dedupe.Entries != bound || in.Dedupe.Evicted != n-bound || in.Counters.Published != n {
		t.Fatalf("after %d ids under a bound of %d: dedupe %+v, published %d", n, bound, in.Dedupe, in.Counters.Published)
	}
	if want := int64(bound) * dedupeCost(dedupeID(0, 8)); in.Dedupe.Bytes != want {
		t.Fatalf("dedupe bytes %d, want %d", in.Dedupe.Bytes, want)
	}
	checkDuplicates(t, ctx, b, "q", n-bound, n, 8, true)
	checkDuplicates(t, ctx, b, "q", 0, n-bound, 8, false)
	if in := info(t, b, "q"); in.Dedupe.Entries != bound || in.Counters.Duplicates != bound {
		t.Fatalf("after the republishes: dedupe %+v, duplicates %d", in.Dedupe, in.Counters.Duplicates)
	}
}

// Large ids fill DedupeMaxBytes first: the report that found the
// unbounded table had 2,372 ids of 64 KiB take 530 MB. Under the default
// bound the table stays within 16 MiB, whatever the ids' length.
func TestDedupeByteBoundHoldsLargeIDs(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{Logger: quietLogger(), MaxMessageBytes: 1 << 20})
	defer b.Close()
	declare(t, ctx, b, QueueConfig{Name: "q", DedupeWindow: time.Hour})
	const size = MaxMessageIDBytes
	fit := int(DefaultDedupeMaxBytes / dedupeCost(dedupeID(0, size)))
	n := fit + 100
	s, c := subscribe(t, b, "q", 64)
	defer s.Close()
	go func() { // ack as they come, so the queue holds nothing but the table
		for {
			select {
			case d := <-c.ch:
				s.Ack(d.Tag)
			case <-ctx.Done():
				return
			}
		}
	}()
	for i := range n {
		publish(t, ctx, b, "q", Message{ID: dedupeID(i, size), Body: []byte("b")})
	}
	in := info(t, b, "q")
	if in.Dedupe.Bytes > DefaultDedupeMaxBytes || in.Dedupe.Entries != int64(fit) || in.Dedupe.Evicted != int64(n-fit) {
		t.Fatalf("%d ids of %d bytes: dedupe %+v; want %d entries within %d bytes", n, size, in.Dedupe, fit, DefaultDedupeMaxBytes)
	}
	checkDuplicates(t, ctx, b, "q", n-fit, n, size, true)
}

// The bounded table round-trips through snapshots and replay: after a
// clean restart (snapshot) and after a crash (snapshot plus the log
// after it) the queue remembers exactly its newest ids within its bound,
// all partitions together, never more, whatever the replay read.
func TestDedupeBoundSurvivesRestart(t *testing.T) {
	ctx := testCtx(t)
	fs := vfs.NewCrashableMem()
	b := openBroker(t, fs, "data", Options{Logger: quietLogger()})
	const bound = 50
	declare(t, ctx, b, QueueConfig{Name: "q", Partitions: 2, DedupeWindow: time.Hour, DedupeMaxEntries: bound})
	key := func(i int) string { return fmt.Sprint("k", i%2) } // keys k0 and k1 land in different partitions
	parts := map[int]bool{}
	for i := range 4 * bound {
		c := publish(t, ctx, b, "q", Message{ID: dedupeID(i, 16), Key: key(i), Body: []byte("x")})
		parts[c.Partition] = true
	}
	if len(parts) != 2 {
		t.Fatalf("keys k0 and k1 went to partitions %v; the test needs both", parts)
	}
	if in := info(t, b, "q"); in.Dedupe.Entries != bound {
		t.Fatalf("dedupe %+v, want %d entries for the queue's two partitions together", in.Dedupe, bound)
	}
	if err := b.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	snap, ok, err := b.meta.snapshot("q", 0)
	if err != nil || !ok || len(snap.Dedupe) != bound/2 {
		t.Fatalf("snapshot of partition 0: %d dedupe ids (stored %v, %v), want %d", len(snap.Dedupe), ok, err, bound/2)
	}
	// More after the checkpoint, so a crash replays them from the log.
	for i := 4 * bound; i < 7*bound; i++ {
		publish(t, ctx, b, "q", Message{ID: dedupeID(i, 16), Key: key(i), Body: []byte("x")})
	}
	crashed := crashClone(t, b, fs)
	b = openBroker(t, crashed, "data", Options{Logger: quietLogger()})
	if in := info(t, b, "q"); in.Dedupe.Entries != bound || in.Dedupe.Evicted != 0 {
		t.Fatalf("after the crash: dedupe %+v, want %d entries (evictions at open not counted)", in.Dedupe, bound)
	}
	checkDuplicates(t, ctx, b, "q", 6*bound, 7*bound, 16, true)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openBroker(t, crashed, "data", Options{Logger: quietLogger()})
	defer b.Close()
	if in := info(t, b, "q"); in.Dedupe.Entries != bound {
		t.Fatalf("after a clean restart: dedupe %+v, want %d entries", in.Dedupe, bound)
	}
	checkDuplicates(t, ctx, b, "q", 6*bound, 7*bound, 16, true)
	checkDuplicates(t, ctx, b, "q", 5*bound, 6*bound, 16, false)
}

// Dedupe bounds are validated, and a re-declare keeps them unless it
// names new ones.
func TestDedupeBoundsValidate(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{Logger: quietLogger()})
	defer b.Close()
	for _, c := range []QueueConfig{
		{Name: "q", DedupeMaxEntries: -1},
		{Name: "q", DedupeMaxEntries: MaxDedupeEntries + 1},
		{Name: "q", DedupeMaxBytes: MinDedupeMaxBytes - 1},
		{Name: "q", DedupeMaxBytes: MaxDedupeMaxBytes + 1},
	} {
		if _, err := b.Declare(ctx, c); !errors.Is(err, ErrInvalid) {
			t.Errorf("declare %+v: %v, want invalid", c, err)
		}
	}
	declare(t, ctx, b, QueueConfig{Name: "q", DedupeWindow: time.Minute, DedupeMaxEntries: 10, DedupeMaxBytes: 2 << 20})
	r := declare(t, ctx, b, QueueConfig{Name: "q"})
	if r.Config.DedupeMaxEntries != 10 || r.Config.DedupeMaxBytes != 2<<20 {
		t.Fatalf("re-declare lost the bounds: %+v", r.Config)
	}
	r = declare(t, ctx, b, QueueConfig{Name: "q", DedupeMaxEntries: 20})
	if r.Config.DedupeMaxEntries != 20 || r.Config.DedupeMaxBytes != 2<<20 {
		t.Fatalf("re-declare with a new entry bound: %+v", r.Config)
	}
}

// A duplicate of a publish still in flight waits for it and gets its
// outcome; a failed original is forgotten, so its retry is stored.
func TestDedupeTablePendingDuplicates(t *testing.T) {
	cfg := &QueueConfig{Name: "q", DedupeWindow: time.Minute}
	tbl := newDedupeTable(1)
	now := time.Now()
	e, dup := tbl.lookup("a", 0, now, cfg, nil)
	if dup {
		t.Fatal("first lookup is a duplicate")
	}
	type answer struct {
		off uint64
		err error
	}
	got := make(chan answer, 2)
	waiter := func(_ int, off uint64, err error) { got <- answer{off, err} }
	if _, dup := tbl.lookup("a", 0, now, cfg, waiter); !dup {
		t.Fatal("second lookup is not a duplicate")
	}
	select {
	case a := <-got:
		t.Fatalf("a duplicate of a pending publish answered before it completed: %+v", a)
	default:
	}
	tbl.complete(e, 7, nil)
	if a := <-got; a.off != 7 || a.err != nil {
		t.Fatalf("duplicate answered %+v, want offset 7", a)
	}

	e, _ = tbl.lookup("b", 0, now, cfg, nil)
	tbl.lookup("b", 0, now, cfg, waiter)
	failed := errors.New("append failed")
	tbl.complete(e, 0, failed)
	if a := <-got; !errors.Is(a.err, failed) {
		t.Fatalf("duplicate of a failed publish answered %+v", a)
	}
	if _, dup := tbl.lookup("b", 0, now, cfg, waiter); dup {
		t.Fatal("a failed publish's id is still remembered")
	}
	if in := tbl.info(); in.Entries != 2 || in.Bytes != dedupeCost("a")+dedupeCost("b") {
		t.Fatalf("table %+v, want 2 entries", in)
	}
}

// DedupeEntryCost is at least what an entry costs the heap beyond its id,
// so the byte bound bounds memory. Measured on the table alone, after a
// collection, without reading the process's RSS.
func TestDedupeEntryCost(t *testing.T) {
	const n = 50000
	cfg := &QueueConfig{Name: "q", DedupeWindow: time.Hour, DedupeMaxEntries: n}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = dedupeID(i, 32)
	}
	now := time.Now()
	before := settledHeap()
	tbl := newDedupeTable(1)
	for i, id := range ids {
		e, _ := tbl.lookup(id, 0, now, cfg, nil)
		tbl.remember(id, 0, uint64(i), now, cfg.dedupeBounds())
		tbl.complete(e, uint64(i), nil)
	}
	perEntry := float64(settledHeap()-before) / n
	t.Logf("%.0f heap bytes per entry beyond its id (DedupeEntryCost %d)", perEntry, DedupeEntryCost)
	if perEntry > DedupeEntryCost {
		t.Fatalf("an entry costs %.0f bytes of heap beyond its id; DedupeEntryCost says %d", perEntry, DedupeEntryCost)
	}
	if in := tbl.info(); in.Entries != n || in.Bytes != n*dedupeCost(ids[0]) {
		t.Fatalf("table %+v", in)
	}
	runtime.KeepAlive(tbl)
}

// settledHeap collects until the live heap stops shrinking (what earlier
// tests left may take more than one cycle to go) and returns it.
func settledHeap() int64 {
	var ms runtime.MemStats
	last := int64(-1)
	for range 20 {
		runtime.GC()
		runtime.ReadMemStats(&ms)
		h := int64(ms.HeapAlloc)
		if last >= 0 && h >= last-4096 {
			return h
		}
		last = h
	}
	return last
}

// What a rebuild gathers keeps only the newest ids within the bounds,
// however many the replay reads.
func TestDedupeRecordsKeepNewest(t *testing.T) {
	var d dedupeRecords
	bounds := dedupeBounds{entries: 10, bytes: 1 << 20}
	for i := range 1000 {
		d.add(dedupeRecord{ID: dedupeID(i, 8), Offset: uint64(i)}, bounds)
	}
	if len(d.recs) != 10 || d.recs[0].Offset != 990 || d.bytes != 10*dedupeCost(dedupeID(0, 8)) {
		t.Fatalf("kept %d records from offset %d, %d bytes", len(d.recs), d.recs[0].Offset, d.bytes)
	}
	bounds = dedupeBounds{entries: 1000, bytes: 3 * dedupeCost(dedupeID(0, 100))}
	for i := range 20 {
		d.add(dedupeRecord{ID: dedupeID(i, 100), Offset: uint64(i)}, bounds)
	}
	if len(d.recs) != 3 || d.recs[2].Offset != 19 || d.bytes > bounds.bytes {
		t.Fatalf("under a byte bound: kept %d records, %d bytes", len(d.recs), d.bytes)
	}
}

// The byte bound is the queue's, whatever its partition count: ids spread
// over eight partitions fill one MiB in all, not one MiB each.
func TestDedupeBoundIsPerQueue(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{Logger: quietLogger(), MaxMessageBytes: 1 << 20})
	defer b.Close()
	declare(t, ctx, b, QueueConfig{Name: "q", Partitions: 8, DedupeWindow: time.Hour, DedupeMaxBytes: MinDedupeMaxBytes})
	const size = MaxMessageIDBytes
	fit := int(MinDedupeMaxBytes / dedupeCost(dedupeID(0, size)))
	parts := map[int]bool{}
	for i := range 8 * fit {
		c := publish(t, ctx, b, "q", Message{ID: dedupeID(i, size), Key: fmt.Sprint("k", i), Body: []byte("b")})
		parts[c.Partition] = true
	}
	if len(parts) < 4 {
		t.Fatalf("the keys reached partitions %v only; the test needs them spread", parts)
	}
	in := info(t, b, "q")
	if in.Dedupe.Bytes > MinDedupeMaxBytes || in.Dedupe.Entries != int64(fit) {
		t.Fatalf("%d ids over %d partitions: dedupe %+v; want %d entries within %d bytes for the queue",
			8*fit, len(parts), in.Dedupe, fit, MinDedupeMaxBytes)
	}
	checkDuplicates(t, ctx, b, "q", 7*fit, 8*fit, size, true)
}

// A duplicate of a publish still pending across a durable-to-buffered
// change must not be confirmed as durable when the original was appended
// (and confirmed) as buffered. The fence is reproduced step by step as
// changeMode takes it: submitMu held, the boundary and the declaration
// changed, the fence lifted.
func TestDedupeDuplicateConfirmSaysTheOriginalsMode(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{})
	defer b.Close()
	declare(t, ctx, b, QueueConfig{Name: "q", Durability: Durable, Partitions: 1, DedupeWindow: time.Minute})
	q, err := b.queue("q")
	if err != nil {
		t.Fatal(err)
	}
	p := q.parts[0]
	p.submitMu.Lock() // the fence of a change to buffered
	orig, dup := make(chan Confirm, 1), make(chan Confirm, 1)
	go b.PublishAsync("q", Message{ID: "x", Body: body(0)}, func(c Confirm, err error) { orig <- c })
	waitFor(t, ctx, "the original pending", func() bool {
		q.dedupe.mu.Lock()
		defer q.dedupe.mu.Unlock()
		return q.dedupe.byID["x"] != nil
	})
	b.PublishAsync("q", Message{ID: "x", Body: body(0)}, func(c Confirm, err error) { dup <- c })
	next := *q.cfg()
	next.Durability = Buffered
	p.dur.Store(uint32(appendBoundary(Buffered)))
	q.config.Store(&next)
	p.submitMu.Unlock()
	o, d := <-orig, <-dup
	if o.Durability != Buffered {
		t.Fatalf("original confirmed %v", o.Durability)
	}
	if d.Durability != o.Durability {
		t.Fatalf("duplicate confirmed %v, the original it stands for %v (only written: DurableNext %d, offset %d)",
			d.Durability, o.Durability, p.log.DurableNext(), o.Offset)
	}
}
