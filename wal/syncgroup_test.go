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

// heldSyncs is a file-system sync for tests: the first one waits until
// want logs wait for the group behind it, so the group the rest form is
// known; every sync then runs the real one unless fail says otherwise.
type heldSyncs struct {
	want    int
	enough  chan struct{}
	once    sync.Once
	mu      sync.Mutex
	calls   int
	failNth int // this call (1-based) fails with EIO
	real    func() error
}

func newHeldSyncs(want int) *heldSyncs {
	return &heldSyncs{want: want, enough: make(chan struct{})}
}

func (h *heldSyncs) onWait(waiting int) {
	if waiting == h.want {
		h.once.Do(func() { close(h.enough) })
	}
}

func (h *heldSyncs) sync() error {
	h.mu.Lock()
	h.calls++
	n := h.calls
	h.mu.Unlock()
	if n == 1 && h.want > 0 {
		<-h.enough
	}
	if n == h.failNth {
		return syscall.EIO
	}
	return h.real()
}

func newTestGroup(t *testing.T, dir string, h *heldSyncs) *SyncGroup {
	t.Helper()
	g, err := NewSyncGroup(dir, SyncGroupOptions{Spacing: -1, syncFS: func() error { return h.sync() }, onWait: h.onWait})
	if errors.Is(err, ErrSyncGroupUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	h.real = g.dir.sync
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// The background syncs of many logs on one file system share its syncs:
// twenty logs whose background syncs ask while one sync runs are all
// covered by the next one, and every record they wrote becomes durable.
func TestSyncGroupSharesOneSync(t *testing.T) {
	const logs = 20
	dir := t.TempDir()
	h := newHeldSyncs(logs) // the first log's sync holds until all twenty wait
	g := newTestGroup(t, dir, h)
	var all []*Log
	for i := range logs {
		l := mustOpen(t, vfs.Default, filepath.Join(dir, string(rune('a'+i))),
			Options{SyncGroup: g, BackgroundSyncInterval: 1, SyncBytesThreshold: -1})
		all = append(all, l)
	}
	ctx := testCtx(t)
	for _, l := range all {
		if _, err := l.Append(ctx, entries(0, 3, 100), AfterFlush); err != nil {
			t.Fatal(err)
		}
	}
	for i, l := range all {
		if _, err := l.WaitDurable(ctx, 3); err != nil {
			t.Fatalf("log %d: %v", i, err)
		}
	}
	st := g.Stats()
	// The first sync covered the log that started it; the nineteen that
	// asked while it ran shared the second. Each log's first grouped sync
	// also checks its own file (errors from before the group opened).
	if st.FSSyncs != 2 || st.Covered != logs || st.Failures != 0 || st.Verified != logs {
		t.Fatalf("stats %+v, want 2 file-system syncs covering %d log syncs, each checked once", st, logs)
	}
	// From the second on, a grouped sync is the file system's alone.
	for _, l := range all {
		if _, err := l.Append(ctx, entries(3, 1, 100), AfterFlush); err != nil {
			t.Fatal(err)
		}
	}
	for i, l := range all {
		if _, err := l.WaitDurable(ctx, 4); err != nil {
			t.Fatalf("log %d: %v", i, err)
		}
	}
	if st := g.Stats(); st.Covered != 2*logs || st.Verified != logs || st.FSSyncs > 2+logs {
		t.Fatalf("stats %+v after a second round, want %d covered and no new checks", st, 2*logs)
	}
}

// A file-system sync that reports an error cannot say whose write was
// lost: every log then checks its own file with an fdatasync of its own,
// the logs of that group at once and every other at its next sync, and
// only the log whose write was lost latches.
func TestSyncGroupErrorLatchesOnlyTheLogThatLostAWrite(t *testing.T) {
	dir := t.TempDir()
	h := newHeldSyncs(0)
	h.failNth = 1 // the first file-system sync reports a writeback error
	g := newTestGroup(t, dir, h)
	badDir := filepath.Join(dir, "bad")
	var armed atomic.Bool // once both logs are open
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if armed.Load() && op.Kind == errorfs.OpFileSyncData && filepath.Dir(op.Path) == badDir {
			return syscall.EIO // the lost write was in bad's file
		}
		return nil
	}))
	opts := Options{FS: fs, SyncGroup: g, BackgroundSyncInterval: 1, SyncBytesThreshold: -1}
	good := mustOpen(t, fs, filepath.Join(dir, "good"), opts)
	bad := mustOpen(t, fs, badDir, opts)
	armed.Store(true)
	ctx := testCtx(t)

	// good's background sync meets the failing file-system sync; its own
	// fdatasync succeeds, so its records are durable and it goes on.
	if _, err := good.Append(ctx, entries(0, 2, 100), AfterFlush); err != nil {
		t.Fatal(err)
	}
	if _, err := good.WaitDurable(ctx, 2); err != nil {
		t.Fatalf("good log: %v", err)
	}
	// bad was not in that group. Its next sync through the group succeeds,
	// but the error seen since makes it check its own file, which fails.
	if _, err := bad.Append(ctx, entries(0, 2, 100), AfterFlush); err != nil {
		t.Fatal(err)
	}
	select {
	case <-bad.Latched():
	case <-ctx.Done():
		t.Fatal("the log whose file lost a write did not latch")
	}
	if bad.DurableNext() != 0 {
		t.Fatalf("bad log counts %d records durable after its write was lost", bad.DurableNext())
	}
	select {
	case <-good.Latched():
		t.Fatal("a log latched for another log's lost write")
	default:
	}
	if _, err := good.Append(ctx, entries(2, 1, 100), AfterFsync); err != nil {
		t.Fatalf("good log after the other's error: %v", err)
	}
	st := g.Stats()
	if st.FSSyncs != 2 || st.Failures != 1 || st.Verified != 2 || st.Covered != 1 {
		t.Fatalf("stats %+v, want 2 file-system syncs, 1 failed, 2 logs checked, 1 covered", st)
	}
}

// Files the group cannot sync (another file system, or no descriptor)
// sync on their own.
func TestSyncGroupLeavesOtherFilesAlone(t *testing.T) {
	h := newHeldSyncs(0)
	g := newTestGroup(t, t.TempDir(), h)
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
			l, err := Open(filepath.Join(dir, "q"), Options{SyncGroup: g, BackgroundSyncInterval: 1, SyncBytesThreshold: -1})
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
			if st := g.Stats(); st.FSSyncs+st.Hurried < 2 {
				t.Fatalf("stats %+v: the second sync neither ran nor left the group", st)
			}
		})
	}
}
