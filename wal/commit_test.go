package wal

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/internal/syncprobe"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Tests of the commit path: group commit, wake-one completions and frontier
// watches, background sync (interval, byte bound, backpressure) and the
// sync-related fields of Status.

// newSyncProbe counts every sync and gates those of segment files.
func newSyncProbe(fs vfs.FS) (*syncprobe.Probe, vfs.FS) {
	return syncprobe.New(fs, func(path string) bool { return strings.HasSuffix(path, segmentSuffix) })
}

// awaitStatus polls the status until cond holds. The status is published
// after the writer finishes an event, so it may trail the completions that
// event signalled by a moment.
func awaitStatus(t *testing.T, ctx context.Context, l *Log, what string, cond func(Status) bool) Status {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		st := l.Status()
		if cond(st) {
			return st
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v; last status %+v", what, ctx.Err(), st)
		}
	}
}

// observe lets d pass (an observation window, not a synchronisation).
func observe(t *testing.T, ctx context.Context, d time.Duration) {
	t.Helper()
	select {
	case <-time.After(d):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
}

func TestGroupCommitSharesSyncs(t *testing.T) {
	const appenders, perAppender = 64, 20
	ctx := testCtx(t)
	probe, fs := newSyncProbe(vfs.NewMem())
	probe.Flush = 500 * time.Microsecond
	var fanInCalls, fanInAppends atomic.Int64 // OnSyncCompleted's reports
	l := mustOpen(t, fs, "log", Options{BackgroundSyncInterval: -1, SyncBytesThreshold: -1,
		OnSyncCompleted: func(n int) { fanInCalls.Add(1); fanInAppends.Add(int64(n)) }})
	defer l.Close()
	openSyncs := probe.Matched.Load()

	results := make([][]AppendResult, appenders)
	errs := make(chan error, appenders)
	var wg sync.WaitGroup
	for g := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perAppender {
				res, err := l.Append(ctx, entries(g*perAppender+i, 1, 64), AfterFsync)
				if err != nil {
					errs <- err
					return
				}
				results[g] = append(results[g], res)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("append: %v", err)
	}

	const n = appenders * perAppender
	var all []AppendResult
	for _, rs := range results {
		all = append(all, rs...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].First < all[j].First })
	for i, r := range all {
		if r.First != uint64(i) || r.Next != uint64(i+1) {
			t.Fatalf("append %d of %d took %+v; offsets must be distinct and contiguous", i, n, r)
		}
	}
	if d := l.DurableNext(); d != n {
		t.Fatalf("durable next %d, want %d", d, n)
	}

	st := awaitStatus(t, ctx, l, "every synced append counted", func(s Status) bool { return s.SyncedAppends >= n })
	syncs := probe.Matched.Load() - openSyncs
	t.Logf("%d appends, %d segment syncs (%.1f appends per sync); status: %d syncs, %d synced appends, %d writes",
		n, syncs, float64(n)/float64(syncs), st.Syncs, st.SyncedAppends, st.Writes)
	if st.SyncedAppends != n {
		t.Fatalf("synced appends %d, want %d", st.SyncedAppends, n)
	}
	if st.Syncs != uint64(syncs) {
		t.Fatalf("status counts %d syncs, the file system saw %d", st.Syncs, syncs)
	}
	// Each sync that completed appends reported how many, and together
	// they are every append.
	if calls := fanInCalls.Load(); fanInAppends.Load() != n || calls == 0 || calls > int64(syncs) {
		t.Fatalf("OnSyncCompleted: %d calls reporting %d appends; want %d appends over at most %d syncs", calls, fanInAppends.Load(), n, syncs)
	}
	if syncs == 0 || syncs > n/2 {
		t.Fatalf("%d syncs for %d appends: group commit should share syncs (at most %d)", syncs, n, n/2)
	}
	if fanIn := float64(st.SyncedAppends) / float64(st.Syncs); fanIn <= 1 {
		t.Fatalf("fan-in %.2f, want > 1", fanIn)
	}
}

func TestCompletionsWakeOnceInOffsetOrder(t *testing.T) {
	const appenders, perAppender = 32, 25
	ctx := testCtx(t)
	l := mustOpen(t, vfs.NewMem(), "log", Options{BackgroundSyncInterval: -1, SyncBytesThreshold: -1})
	defer l.Close()

	comps := make([][]*Completion, appenders)
	var wg sync.WaitGroup
	for g := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := AfterFsync
			if g%4 == 3 {
				d = AfterFlush // mixed in: they complete at written, out of the fsync order
			}
			for i := range perAppender {
				c := l.AppendAsync(entries(i, 1+i%3, 32), d)
				if _, err := c.Wait(ctx); err != nil {
					t.Errorf("append: %v", err)
					return
				}
				comps[g] = append(comps[g], c)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	var all, fsynced []*Completion
	for _, cs := range comps {
		all = append(all, cs...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].res.First < all[j].res.First })
	next := uint64(0)
	seqs := map[uint64]bool{}
	for _, c := range all {
		if c.res.First != next {
			t.Fatalf("completion at %+v, want first %d", c.res, next)
		}
		next = c.res.Next
		if c.wakeSeq == 0 || seqs[c.wakeSeq] {
			t.Fatalf("completion %+v has wake sequence %d, zero or shared", c.res, c.wakeSeq)
		}
		seqs[c.wakeSeq] = true
		if c.dur == AfterFsync {
			fsynced = append(fsynced, c)
		}
	}
	for i := 1; i < len(fsynced); i++ {
		if a, b := fsynced[i-1], fsynced[i]; a.wakeSeq >= b.wakeSeq {
			t.Fatalf("fsync completion at %d woken %d, after the one at %d woken %d: wakes out of offset order",
				a.res.First, a.wakeSeq, b.res.First, b.wakeSeq)
		}
	}

	n := uint64(len(all))
	st := awaitStatus(t, ctx, l, "every completion counted", func(s Status) bool { return s.Appends >= n })
	if st.Wakeups != n || st.Appends != n {
		t.Fatalf("%d appends made %d wakeups (status appends %d); want exactly one each", n, st.Wakeups, st.Appends)
	}
	t.Logf("%d appends (%d after fsync), %d syncs", n, len(fsynced), st.Syncs)
}

func TestFrontierWakesExactlySatisfiedWaiters(t *testing.T) {
	ctx := testCtx(t)
	var f frontier
	f.advance(1)

	// Distinct targets 2, 4, ..., 40, registered out of order.
	const n = 20
	targets := make([]uint64, n)
	for i := range targets {
		targets[i] = uint64(2 + 2*((i*7)%n))
	}
	type waiter struct {
		target uint64
		done   chan struct{}
		got    uint64
		err    error
	}
	ws := make([]*waiter, n)
	for i, target := range targets {
		w := &waiter{target: target, done: make(chan struct{})}
		ws[i] = w
		go func() {
			w.got, w.err = f.wait(ctx, w.target)
			close(w.done)
		}()
	}
	registered := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.waiters)
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for registered() < n {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("only %d of %d waiters registered", registered(), n)
		}
	}

	// A wait already satisfied returns at once and wakes nobody.
	if v, err := f.wait(ctx, 1); v != 1 || err != nil {
		t.Fatalf("satisfied wait returned %d, %v", v, err)
	}
	// A cancelled wait leaves the heap and is never woken.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := f.wait(cctx, 3); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	if got := registered(); got != n {
		t.Fatalf("%d waiters registered after a cancelled wait, want %d", got, n)
	}
	if got := f.wakeCount(); got != 0 {
		t.Fatalf("%d wakes before any advance", got)
	}

	// Each step wakes exactly the waiters whose target it reaches; stepping
	// one target at a time shows they are woken lowest target first.
	steps := []uint64{1, 3, 4, 5, 11, 12, 14, 16, 16, 30, 33, 40, 41}
	woken := map[uint64]bool{}
	for _, v := range steps {
		before := f.wakeCount()
		f.advance(v)
		want := 0
		for _, w := range ws {
			if w.target <= v && !woken[w.target] {
				want++
			}
		}
		if got := f.wakeCount() - before; got != uint64(want) {
			t.Fatalf("advance to %d woke %d waiters, want %d", v, got, want)
		}
		for _, w := range ws {
			if w.target > v {
				select {
				case <-w.done:
					t.Fatalf("waiter for %d returned at frontier %d", w.target, v)
				default:
				}
				continue
			}
			select {
			case <-w.done:
			case <-ctx.Done():
				t.Fatalf("waiter for %d still blocked at frontier %d", w.target, v)
			}
			if w.err != nil || w.got < w.target {
				t.Fatalf("waiter for %d returned %d, %v", w.target, w.got, w.err)
			}
			woken[w.target] = true
		}
	}
	if got := f.wakeCount(); got != n {
		t.Fatalf("%d wakes for %d waiters", got, n)
	}
	if got := registered(); got != 0 {
		t.Fatalf("%d waiters left registered", got)
	}
}

func TestBackgroundSync(t *testing.T) {
	t.Run("interval makes after-flush appends durable", func(t *testing.T) {
		ctx := testCtx(t)
		l := mustOpen(t, vfs.NewMem(), "log", Options{BackgroundSyncInterval: 20 * time.Millisecond, SyncBytesThreshold: -1})
		defer l.Close()
		for i := 0; i < 50; i += 5 {
			if _, err := l.Append(ctx, entries(i, 5, 100), AfterFlush); err != nil {
				t.Fatal(err)
			}
		}
		written := l.WrittenNext()
		if d, err := l.WaitDurable(ctx, written); err != nil || d < written {
			t.Fatalf("wait durable %d: got %d, %v", written, d, err)
		}
		awaitStatus(t, ctx, l, "a background sync counted", func(s Status) bool { return s.BackgroundSyncs >= 1 })
	})

	t.Run("idle log does not sync", func(t *testing.T) {
		ctx := testCtx(t)
		probe, fs := newSyncProbe(vfs.NewMem())
		l := mustOpen(t, fs, "log", Options{BackgroundSyncInterval: 20 * time.Millisecond})
		defer l.Close()
		for i := 0; i < 3; i++ {
			if _, err := l.Append(ctx, entries(i, 1, 100), AfterFlush); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := l.WaitDurable(ctx, l.WrittenNext()); err != nil {
			t.Fatal(err)
		}
		st := awaitStatus(t, ctx, l, "caught up and nothing pending", func(s Status) bool {
			return s.DurableLagRecords == 0 && !s.SyncPending && s.Syncs >= 1
		})
		syncs := probe.All.Load()
		observe(t, ctx, time.Second)
		if got := probe.All.Load() - syncs; got != 0 {
			t.Fatalf("idle log made %d sync calls in a second", got)
		}
		if after := l.Status(); after.Syncs != st.Syncs || after.BackgroundSyncs != st.BackgroundSyncs || after.SyncPending {
			t.Fatalf("idle log status moved: before %d syncs (%d background), after %d (%d), pending %v",
				st.Syncs, st.BackgroundSyncs, after.Syncs, after.BackgroundSyncs, after.SyncPending)
		}
	})

	t.Run("off leaves after-flush appends unsynced", func(t *testing.T) {
		ctx := testCtx(t)
		probe, fs := newSyncProbe(vfs.NewMem())
		l := mustOpen(t, fs, "log", Options{BackgroundSyncInterval: -1, SyncBytesThreshold: -1})
		defer l.Close()
		segSyncs := probe.Matched.Load()
		for i := 0; i < 100; i += 10 {
			if _, err := l.Append(ctx, entries(i, 10, 1000), AfterFlush); err != nil {
				t.Fatal(err)
			}
		}
		observe(t, ctx, 200*time.Millisecond)
		st := l.Status()
		if st.DurableNext >= st.WrittenNext || l.DurableNext() != 0 {
			t.Fatalf("background sync off, yet durable %d of written %d", st.DurableNext, st.WrittenNext)
		}
		if st.Syncs != 0 || st.SyncPending {
			t.Fatalf("background sync off, yet %d syncs, pending %v", st.Syncs, st.SyncPending)
		}
		if got := probe.Matched.Load() - segSyncs; got != 0 {
			t.Fatalf("background sync off, yet %d segment syncs after open", got)
		}
	})

	t.Run("interval turned on live", func(t *testing.T) {
		ctx := testCtx(t)
		l := mustOpen(t, vfs.NewMem(), "log", Options{BackgroundSyncInterval: -1, SyncBytesThreshold: -1})
		defer l.Close()
		if _, err := l.Append(ctx, entries(0, 10, 100), AfterFlush); err != nil {
			t.Fatal(err)
		}
		written := l.WrittenNext()
		if d := l.DurableNext(); d >= written {
			t.Fatalf("durable %d of written %d with background sync off", d, written)
		}
		if err := l.SetBackgroundSyncInterval(10 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if d, err := l.WaitDurable(ctx, written); err != nil || d < written {
			t.Fatalf("wait durable %d: got %d, %v", written, d, err)
		}
		st := awaitStatus(t, ctx, l, "a background sync counted", func(s Status) bool { return s.BackgroundSyncs >= 1 })
		if st.BackgroundSyncInterval != 10*time.Millisecond {
			t.Fatalf("status interval %v", st.BackgroundSyncInterval)
		}
	})

	t.Run("byte bound starts a sync", func(t *testing.T) {
		const threshold = 64 << 10
		ctx := testCtx(t)
		l := mustOpen(t, vfs.NewMem(), "log", Options{BackgroundSyncInterval: -1, SyncBytesThreshold: threshold})
		defer l.Close()
		// Append until the unsynced bytes reach the threshold; the append
		// that reaches it starts a sync of everything written.
		unsynced := 0
		for i := 0; unsynced < threshold; i++ {
			es := entries(i, 1, 1000)
			if _, err := l.Append(ctx, es, AfterFlush); err != nil {
				t.Fatal(err)
			}
			unsynced += encodedSize(len(es[0].Payload))
		}
		written := l.WrittenNext()
		if d, err := l.WaitDurable(ctx, written); err != nil || d < written {
			t.Fatalf("wait durable %d: got %d, %v", written, d, err)
		}
		awaitStatus(t, ctx, l, "a background sync counted", func(s Status) bool { return s.BackgroundSyncs >= 1 })
	})

	t.Run("byte bound holds appends past twice the threshold", func(t *testing.T) {
		const threshold = 64 << 10
		ctx := testCtx(t)
		probe, fs := newSyncProbe(vfs.NewMem())
		l := mustOpen(t, fs, "log", Options{BackgroundSyncInterval: -1, SyncBytesThreshold: threshold})
		defer l.Close()
		defer probe.Open()
		probe.Shut()

		// The append that reaches the threshold starts a sync, which the gate
		// holds; appends go on until twice the threshold is unsynced.
		unsynced, i := 0, 0
		for ; unsynced < 2*threshold; i++ {
			es := entries(i, 1, 4000)
			if _, err := l.Append(ctx, es, AfterFlush); err != nil {
				t.Fatal(err)
			}
			unsynced += encodedSize(len(es[0].Payload))
			if unsynced >= threshold && unsynced-encodedSize(len(es[0].Payload)) < threshold {
				select {
				case <-probe.Held:
				case <-ctx.Done():
					t.Fatal("reaching the threshold started no sync")
				}
			}
		}
		awaitStatus(t, ctx, l, "appends held", func(s Status) bool { return s.Backpressured > 0 })

		// While held, an append or a Sync with a cancelled context gives up.
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		for _, tc := range []struct {
			name string
			call func() error
		}{
			{"append", func() error { _, err := l.Append(cctx, entries(i, 1, 100), AfterFlush); return err }},
			{"sync", func() error { return l.Sync(cctx) }},
		} {
			cancelled := make(chan error, 1)
			go func() { cancelled <- tc.call() }()
			select {
			case err := <-cancelled:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("held %s with a cancelled context: %v", tc.name, err)
				}
			case <-ctx.Done():
				t.Fatalf("held %s ignored its cancelled context", tc.name)
			}
		}

		// AppendAsync waits for the writer to take the append, so it runs on
		// its own goroutine; the append must not complete while the sync is
		// held, over an observation window.
		issued := make(chan *Completion, 1)
		go func() { issued <- l.AppendAsync(entries(i, 1, 100), AfterFlush) }()
		var held *Completion
		window := time.After(100 * time.Millisecond)
		select {
		case held = <-issued:
			select {
			case <-held.Done():
				t.Fatalf("append past twice the threshold completed while the sync was held: %+v", held.res)
			case <-window:
			}
		case <-window:
		}
		if d := l.DurableNext(); d != 0 {
			t.Fatalf("durable %d while the only sync is held", d)
		}
		if st := l.Status(); !st.SyncPending || st.WrittenNext != uint64(i) {
			t.Fatalf("while held: pending %v, written %d (want %d)", st.SyncPending, st.WrittenNext, i)
		}

		probe.Open()
		if held == nil {
			select {
			case held = <-issued:
			case <-ctx.Done():
				t.Fatal("append still not taken after the sync was released")
			}
		}
		if _, err := held.Wait(ctx); err != nil {
			t.Fatalf("held append: %v", err)
		}
		if d := l.DurableNext(); d == 0 {
			t.Fatal("the released sync moved nothing to durable")
		}
	})
}

func TestStatusSyncFields(t *testing.T) {
	ctx := testCtx(t)
	probe, fs := newSyncProbe(vfs.NewMem())
	l := mustOpen(t, fs, "log", Options{BackgroundSyncInterval: -1, SyncBytesThreshold: -1})
	defer l.Close()
	defer probe.Open()

	st := l.Status()
	if !st.OldestUnsynced.IsZero() || st.DurableLagRecords != 0 || st.DurableLagBytes != 0 || st.SyncPending {
		t.Fatalf("fresh log status %+v", st)
	}
	openSync := st.LastSync

	// While nothing syncs, the lag is exactly what was written past durable.
	var lagBytes int64
	before := time.Now()
	for i, n := range []int{1, 3, 7, 2} {
		es := entries(10*i, n, 50+100*i)
		if _, err := l.Append(ctx, es, AfterFlush); err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			lagBytes += int64(encodedSize(len(e.Payload)))
		}
		st := awaitStatus(t, ctx, l, "the append's bytes counted", func(s Status) bool { return s.DurableLagBytes >= lagBytes })
		if st.DurableLagRecords != st.WrittenNext-st.DurableNext || st.DurableLagBytes != lagBytes {
			t.Fatalf("after append %d: lag %d records %d bytes, want %d records %d bytes",
				i, st.DurableLagRecords, st.DurableLagBytes, st.WrittenNext-st.DurableNext, lagBytes)
		}
		if st.OldestUnsynced.Before(before) || st.OldestUnsynced.After(time.Now()) {
			t.Fatalf("after append %d: oldest unsynced %v, want since %v", i, st.OldestUnsynced, before)
		}
		if st.SyncPending || st.Syncs != 0 {
			t.Fatalf("after append %d: pending %v, %d syncs with background sync off", i, st.SyncPending, st.Syncs)
		}
	}
	oldest := l.Status().OldestUnsynced

	// A sync held in flight shows as pending, with the lag unchanged.
	probe.Shut()
	synced := make(chan error, 1)
	beforeSync := time.Now()
	go func() { synced <- l.Sync(ctx) }()
	select {
	case <-probe.Held:
	case <-ctx.Done():
		t.Fatal("Sync started no segment sync")
	}
	st = awaitStatus(t, ctx, l, "sync pending", func(s Status) bool { return s.SyncPending })
	if st.DurableLagBytes != lagBytes || !st.OldestUnsynced.Equal(oldest) || !st.LastSync.Equal(openSync) {
		t.Fatalf("with a sync in flight: lag %d bytes (want %d), oldest %v (want %v), last sync %v (want %v)",
			st.DurableLagBytes, lagBytes, st.OldestUnsynced, oldest, st.LastSync, openSync)
	}

	probe.Open()
	if err := <-synced; err != nil {
		t.Fatal(err)
	}
	// The held sync's duration includes its time at the gate.
	st = awaitStatus(t, ctx, l, "sync applied", func(s Status) bool { return s.Syncs == 1 && !s.SyncPending })
	if st.LastSync.Before(beforeSync) || st.LastSyncDuration <= 0 {
		t.Fatalf("after a sync: last sync %v (want since %v), took %v", st.LastSync, beforeSync, st.LastSyncDuration)
	}
	if !st.OldestUnsynced.IsZero() || st.DurableLagRecords != 0 || st.DurableLagBytes != 0 || st.DurableNext != st.WrittenNext {
		t.Fatalf("caught up, yet status %+v", st)
	}
	if st.BackgroundSyncs != 0 {
		t.Fatalf("%d background syncs with background sync off", st.BackgroundSyncs)
	}
}

// An AfterNextFsync append waits for the durable frontier like AfterFsync
// but starts no sync: the next AfterFsync append's sync, SyncSoon or the
// background timer covers it, and with no background interval it syncs
// at once.
func TestAfterNextFsyncSharesTheNextSync(t *testing.T) {
	notDone := func(t *testing.T, c *Completion, what string) {
		t.Helper()
		select {
		case <-c.Done():
			res, err := c.Result()
			t.Fatalf("%s: completed (%+v, %v) with no sync asked for", what, res, err)
		default:
		}
	}

	t.Run("the next sync covers it", func(t *testing.T) {
		ctx := testCtx(t)
		probe, fs := newSyncProbe(vfs.NewMem())
		l := mustOpen(t, fs, "log", Options{BackgroundSyncInterval: time.Hour, SyncBytesThreshold: -1})
		defer l.Close()
		const rounds = 20
		before := probe.Matched.Load()
		var lazy *Completion
		for i := 0; i < rounds; i++ {
			if _, err := l.Append(ctx, entries(2*i, 1, 100), AfterFsync); err != nil {
				t.Fatal(err)
			}
			if lazy != nil { // the sync just done covered the last round's
				if res, err := lazy.Result(); !isDone(lazy) || err != nil || res.Next != uint64(2*i) {
					t.Fatalf("round %d: the after-next-fsync append before it: done %v, %+v, %v", i, isDone(lazy), res, err)
				}
			}
			lazy = l.AppendAsync(entries(2*i+1, 1, 100), AfterNextFsync)
			if _, err := l.WaitWritten(ctx, uint64(2*i+2)); err != nil {
				t.Fatal(err)
			}
			notDone(t, lazy, fmt.Sprintf("round %d", i))
		}
		if got := probe.Matched.Load() - before; got != rounds {
			t.Fatalf("%d segment syncs for %d after-fsync and %d after-next-fsync appends, want %d", got, rounds, rounds, rounds)
		}
		l.SyncSoon()
		if res, err := lazy.Wait(ctx); err != nil || res.Next != 2*rounds {
			t.Fatalf("after SyncSoon: %+v, %v", res, err)
		}
		if d := l.DurableNext(); d != 2*rounds {
			t.Fatalf("durable next %d, want %d", d, 2*rounds)
		}
	})

	t.Run("the background timer covers it", func(t *testing.T) {
		ctx := testCtx(t)
		l := mustOpen(t, vfs.NewMem(), "log", Options{BackgroundSyncInterval: 20 * time.Millisecond, SyncBytesThreshold: -1})
		defer l.Close()
		if res, err := l.AppendAsync(entries(0, 3, 100), AfterNextFsync).Wait(ctx); err != nil || res.Next != 3 {
			t.Fatalf("append: %+v, %v", res, err)
		}
		if st := l.Status(); st.BackgroundSyncs != 1 || st.Syncs != 1 {
			t.Fatalf("want the one sync a background one: %d syncs, %d background", st.Syncs, st.BackgroundSyncs)
		}
	})

	t.Run("with no background sync it syncs at once", func(t *testing.T) {
		ctx := testCtx(t)
		l := mustOpen(t, vfs.NewMem(), "log", Options{BackgroundSyncInterval: -1, SyncBytesThreshold: -1})
		defer l.Close()
		if res, err := l.AppendAsync(entries(0, 3, 100), AfterNextFsync).Wait(ctx); err != nil || res.Next != 3 {
			t.Fatalf("append: %+v, %v", res, err)
		}
		if d := l.DurableNext(); d != 3 {
			t.Fatalf("durable next %d, want 3", d)
		}
	})
}

func isDone(c *Completion) bool {
	select {
	case <-c.Done():
		return true
	default:
		return false
	}
}
