package wal

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// rounds drives a group's syncs for tests: the k-th sync's leader waits
// until want[k] logs wait (the leader among them), so who shares each
// sync is known; each sync runs the real one unless failNth names it.
type rounds struct {
	want    []int
	ready   []chan struct{}
	mu      sync.Mutex
	waiting int // the round whose count onWait watches
	led     int // syncs led
	calls   int
	failNth int // this file-system sync (1-based) fails with EIO
	real    func() error
}

func newRounds(want ...int) *rounds {
	r := &rounds{want: want}
	for range want {
		r.ready = append(r.ready, make(chan struct{}))
	}
	return r
}

// onWait runs with the group's lock held, as each log starts to wait.
func (r *rounds) onWait(waiting int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.waiting < len(r.want) && waiting == r.want[r.waiting] {
		close(r.ready[r.waiting])
		r.waiting++
	}
}

func (r *rounds) beforeLead() {
	r.mu.Lock()
	k := r.led
	r.led++
	r.mu.Unlock()
	if k < len(r.ready) {
		<-r.ready[k]
	}
}

func (r *rounds) sync() error {
	r.mu.Lock()
	r.calls++
	n := r.calls
	r.mu.Unlock()
	if n == r.failNth {
		return syscall.EIO
	}
	return r.real()
}

func newTestGroup(t *testing.T, dir string, r *rounds) *SyncGroup {
	t.Helper()
	g, err := NewSyncGroup(dir, SyncGroupOptions{Spacing: -1, syncFS: r.sync, onWait: r.onWait, beforeLead: r.beforeLead})
	if errors.Is(err, ErrSyncGroupUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	r.real = g.dir.sync
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// appendAll appends one record to each log and waits until each is durable.
func appendAll(t *testing.T, ctx context.Context, d Boundary, logs ...*Log) {
	t.Helper()
	var cs []*Completion
	for _, l := range logs {
		cs = append(cs, l.AppendAsync(entries(int(l.WrittenNext()), 1, 100), d))
	}
	for i, c := range cs {
		res, err := c.Wait(ctx)
		if err == nil {
			_, err = logs[i].WaitDurable(ctx, res.Next)
		}
		if err != nil {
			t.Fatalf("log %d: %v", i, err)
		}
	}
}

// The background syncs of many logs on one file system share its syncs:
// twenty logs that ask together are covered by one file-system sync, and
// every record they wrote becomes durable; a log that asks alone syncs
// its own file.
func TestSyncGroupSharesOneSync(t *testing.T) {
	const logs = 20
	dir := t.TempDir()
	r := newRounds(logs) // the first sync waits until all twenty ask
	g := newTestGroup(t, dir, r)
	var all []*Log
	for i := range logs {
		all = append(all, mustOpen(t, vfs.Default, filepath.Join(dir, string(rune('a'+i))),
			Options{SyncGroup: g, BackgroundSyncInterval: 1, SyncBytesThreshold: -1}))
	}
	ctx := testCtx(t)
	appendAll(t, ctx, AfterFlush, all...)
	// Each log's first grouped sync also checks its own file (errors
	// from before the group opened).
	if st := g.Stats(); st.FSSyncs != 1 || st.Covered != logs || st.Failures != 0 || st.Verified != logs || st.Alone != 0 {
		t.Fatalf("stats %+v, want 1 file-system sync covering %d log syncs, each checked once", st, logs)
	}
	// From then on a shared sync is the file system's alone, and a log
	// that asks with no other syncs its own file.
	appendAll(t, ctx, AfterFlush, all...)
	appendAll(t, ctx, AfterFlush, all[0])
	if st := g.Stats(); st.Covered+st.Alone != 2*logs+1 || st.Verified != logs || st.Alone == 0 {
		t.Fatalf("stats %+v after two more rounds, want %d log syncs, no new checks, the last alone", st, 2*logs+1)
	}
}

// Appends that wait for their sync (a durable queue's) share file-system
// syncs too, in a lane of their own without spacing; one that asks alone
// is one fdatasync of its own file, as without a group.
func TestSyncGroupSharesWaitedSyncs(t *testing.T) {
	dir := t.TempDir()
	g, err := NewSyncGroup(dir, SyncGroupOptions{})
	if errors.Is(err, ErrSyncGroupUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = g.Close() }()
	r := newRounds(2) // the waited lane's first sync waits for both logs
	g.waited.opts.onWait, g.waited.opts.beforeLead = r.onWait, r.beforeLead
	a := mustOpen(t, vfs.Default, filepath.Join(dir, "a"), Options{SyncGroup: g})
	b := mustOpen(t, vfs.Default, filepath.Join(dir, "b"), Options{SyncGroup: g})
	ctx := testCtx(t)
	appendAll(t, ctx, AfterFsync, a, b)
	appendAll(t, ctx, AfterFsync, a)
	st := g.WaitedStats()
	if st.FSSyncs != 1 || st.Covered != 2 || st.Alone != 1 {
		t.Fatalf("waited lane %+v, want one file-system sync for both logs, then one alone", st)
	}
	if bg := g.Stats(); bg.FSSyncs+bg.Covered+bg.Alone != 0 {
		t.Fatalf("background lane %+v used by appends that wait", bg)
	}
}

// A file-system sync that reports an error cannot say whose write was
// lost: every log then checks its own file with an fdatasync of its own,
// the logs of that sync at once and every other at its next shared sync,
// and only the log whose write was lost latches.
func TestSyncGroupErrorLatchesOnlyTheLogThatLostAWrite(t *testing.T) {
	dir := t.TempDir()
	// Three shared syncs of two logs each: all three logs' first (which
	// each checks), then good and other's (which fails), then bad and
	// good's (after the error, bad checks its own file).
	r := newRounds(2, 2, 2)
	r.failNth = 2
	g := newTestGroup(t, dir, r)
	badDir := filepath.Join(dir, "bad")
	var armed atomic.Bool // once the first round is through
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if armed.Load() && op.Kind == errorfs.OpFileSyncData && filepath.Dir(op.Path) == badDir {
			return syscall.EIO // the lost write was in bad's file
		}
		return nil
	}))
	opts := Options{FS: fs, SyncGroup: g, BackgroundSyncInterval: 1, SyncBytesThreshold: -1}
	good := mustOpen(t, fs, filepath.Join(dir, "good"), opts)
	other := mustOpen(t, fs, filepath.Join(dir, "other"), opts)
	bad := mustOpen(t, fs, badDir, opts)
	ctx := testCtx(t)
	appendAll(t, ctx, AfterFlush, good, bad)
	armed.Store(true)

	// good and other meet the failing file-system sync; their own
	// fdatasyncs succeed, so their records are durable and they go on.
	appendAll(t, ctx, AfterFlush, good, other)
	// bad was not in that sync. Its next shared sync succeeds, but the
	// error seen since makes it check its own file, which fails.
	ca := bad.AppendAsync(entries(1, 1, 100), AfterFlush)
	cg := good.AppendAsync(entries(2, 1, 100), AfterFlush)
	for _, c := range []*Completion{ca, cg} {
		if _, err := c.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-bad.Latched():
	case <-ctx.Done():
		t.Fatal("the log whose file lost a write did not latch")
	}
	if bad.DurableNext() != 1 {
		t.Fatalf("bad log counts %d records durable after its second write was lost", bad.DurableNext())
	}
	if _, err := good.WaitDurable(ctx, 3); err != nil {
		t.Fatalf("good log after the other's error: %v", err)
	}
	select {
	case <-good.Latched():
		t.Fatal("a log latched for another log's lost write")
	default:
	}
	// Checks: good and bad's first, good and other's after the failure,
	// bad's after it; good does not check again.
	if st := g.Stats(); st.FSSyncs != 3 || st.Failures != 1 || st.Verified != 5 {
		t.Fatalf("stats %+v, want 3 file-system syncs, 1 failed, 5 checks", st)
	}
}

// Files the group cannot sync (another file system, or no descriptor)
// sync on their own.
func TestSyncGroupLeavesOtherFilesAlone(t *testing.T) {
	g := newTestGroup(t, t.TempDir(), newRounds())
	mem := vfs.NewMem()
	l := mustOpen(t, mem, "q", Options{FS: mem, SyncGroup: g, BackgroundSyncInterval: 1, SyncBytesThreshold: -1})
	ctx := testCtx(t)
	if _, err := l.Append(ctx, entries(0, 1, 10), AfterFlush); err != nil {
		t.Fatal(err)
	}
	if _, err := l.WaitDurable(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if st := g.Stats(); st.FSSyncs != 0 || st.Covered != 0 {
		t.Fatalf("stats %+v: the group synced for a file it does not hold", st)
	}
}

func TestKernelVersion(t *testing.T) {
	for _, c := range []struct {
		release      string
		major, minor int
		ok           bool
	}{
		{"6.18.44-fc-v1300", 6, 18, true},
		{"5.8-rc1", 5, 8, true},
		{"5.4.0-150-generic", 5, 4, true},
		{"6", 0, 0, false},
		{"x.y", 0, 0, false},
	} {
		major, minor, ok := kernelVersion(c.release)
		if major != c.major || minor != c.minor || ok != c.ok {
			t.Errorf("kernelVersion(%q) = %d, %d, %v; want %d, %d, %v", c.release, major, minor, ok, c.major, c.minor, c.ok)
		}
	}
}

// Nothing on a publish's path waits for the group's gathering: a durable
// append, or a Close, behind a grouped background sync makes the log sync
// its own file (or the gathering leader sync at once), and completes.
func TestSyncGroupDoesNotHoldAppendsThatWait(t *testing.T) {
	for _, tc := range []struct {
		name string
		then func(ctx context.Context, l *Log) error
	}{
		{"durable append", func(ctx context.Context, l *Log) error {
			_, err := l.Append(ctx, entries(2, 1, 100), AfterFsync)
			return err
		}},
		{"close", func(_ context.Context, l *Log) error { return l.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			entered := make(chan struct{}, 2)
			// An hour between syncs: were anything to wait for the next one,
			// the test's deadline would end first. The first sync (the
			// logs' first look at their own files) goes at once.
			g, err := NewSyncGroup(dir, SyncGroupOptions{Spacing: time.Hour, onWait: func(int) { entered <- struct{}{} }})
			if errors.Is(err, ErrSyncGroupUnsupported) {
				t.Skip(err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = g.Close() }()
			// Every write starts a background sync (the byte bound at one
			// byte); the interval is long enough to let the spacing be an
			// hour.
			l, err := Open(filepath.Join(dir, "q"), Options{SyncGroup: g, BackgroundSyncInterval: 2 * time.Hour, SyncBytesThreshold: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = l.Close() }()
			ctx := testCtx(t)
			// The first grouped sync goes at once; the second waits out the
			// hour, leading a gathering.
			if _, err := l.Append(ctx, entries(0, 1, 100), AfterFlush); err != nil {
				t.Fatal(err)
			}
			if _, err := l.WaitDurable(ctx, 1); err != nil {
				t.Fatal(err)
			}
			<-entered
			if _, err := l.Append(ctx, entries(1, 1, 100), AfterFlush); err != nil {
				t.Fatal(err)
			}
			select {
			case <-entered:
			case <-ctx.Done():
				t.Fatal("no second background sync reached the group")
			}
			if err := tc.then(ctx, l); err != nil {
				t.Fatal(err)
			}
			if st := g.Stats(); st.FSSyncs+st.Hurried+st.Alone < 2 {
				t.Fatalf("stats %+v: the second background sync never ended", st)
			}
		})
	}
}

// A shared background sync waits at most half its leader's background
// sync interval, however long the group's spacing: a log's written
// records wait at most 1.5 times its interval for their sync.
func TestSyncGroupSpacingIsAtMostHalfTheInterval(t *testing.T) {
	dir := t.TempDir()
	g, err := NewSyncGroup(dir, SyncGroupOptions{Spacing: time.Hour})
	if errors.Is(err, ErrSyncGroupUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = g.Close() }()
	l := mustOpen(t, vfs.Default, filepath.Join(dir, "q"), Options{SyncGroup: g, BackgroundSyncInterval: 20 * time.Millisecond, SyncBytesThreshold: -1})
	ctx := testCtx(t)
	for range 3 { // the first goes at once; the others would wait an hour
		appendAll(t, ctx, AfterFlush, l)
	}
	if st := g.Stats(); st.Alone+st.Covered != 3 || st.Hurried != 0 {
		t.Fatalf("stats %+v, want three background syncs, none hurried", st)
	}
}

// A hurried log that is not leading leaves the group's wait without
// ending the leader's: the leader's gathering goes on for the others
// until its own append hurries it.
func TestSyncGroupHurryEndsOnlyTheHurriedLogsWait(t *testing.T) {
	dir := t.TempDir()
	entered := make(chan int, 4)
	g, err := NewSyncGroup(dir, SyncGroupOptions{Spacing: time.Hour, onWait: func(n int) { entered <- n }})
	if errors.Is(err, ErrSyncGroupUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = g.Close() }()
	// A record of 100 bytes passes the byte bound and starts a background
	// sync; a second before it is synced (past twice the bound) holds
	// appends and hurries it. The interval lets the spacing be an hour.
	opts := Options{SyncGroup: g, BackgroundSyncInterval: 2 * time.Hour, SyncBytesThreshold: 100}
	leader := mustOpen(t, vfs.Default, filepath.Join(dir, "leader"), opts)
	other := mustOpen(t, vfs.Default, filepath.Join(dir, "other"), opts)
	ctx := testCtx(t)
	// A first shared sync sets the spacing's start; its logs go at once.
	appendAll(t, ctx, AfterFlush, leader)
	<-entered
	// leader's next background sync leads a gathering, other's joins it.
	for _, l := range []*Log{leader, other} {
		if _, err := l.Append(ctx, entries(int(l.WrittenNext()), 1, 100), AfterFlush); err != nil {
			t.Fatal(err)
		}
		select {
		case <-entered:
		case <-ctx.Done():
			t.Fatal("the background sync did not reach the group")
		}
	}
	// other's durable append hurries other: it leaves and syncs its own
	// file; the leader still waits.
	if _, err := other.Append(ctx, entries(int(other.WrittenNext()), 1, 100), AfterFsync); err != nil {
		t.Fatal(err)
	}
	if st := g.Stats(); st.Hurried != 1 || st.Waiting != 1 || leader.DurableNext() != 1 {
		t.Fatalf("stats %+v, leader durable to %d: want other gone and the leader still gathering", st, leader.DurableNext())
	}
	// The leader's own durable append ends its gathering.
	if _, err := leader.Append(ctx, entries(int(leader.WrittenNext()), 1, 100), AfterFsync); err != nil {
		t.Fatal(err)
	}
}
