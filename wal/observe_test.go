package wal

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// syncSeen records what Options.OnSync reported.
type syncSeen struct {
	mu   sync.Mutex
	ok   int
	errs int
}

func (s *syncSeen) observe(took time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.errs++
	} else {
		s.ok++
	}
}

func (s *syncSeen) counts() (ok, errs int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ok, s.errs
}

// TestOnSyncSeesEverySync checks that the hook sees each completed sync the
// status counts.
func TestOnSyncSeesEverySync(t *testing.T) {
	ctx := testCtx(t)
	var seen syncSeen
	l := mustOpen(t, vfs.NewMem(), "log", Options{BackgroundSyncInterval: -1, SyncBytesThreshold: -1,
		OnSync: seen.observe, Logger: slog.New(slog.DiscardHandler)})
	defer l.Close()
	for i := range 3 {
		if _, err := l.Append(ctx, entries(i, 1, 64), AfterFsync); err != nil {
			t.Fatal(err)
		}
	}
	ok, errs := seen.counts()
	if st := l.Status(); uint64(ok) != st.Syncs || ok < 1 || errs != 0 {
		t.Fatalf("hook saw %d syncs, %d failures; status counts %d syncs", ok, errs, st.Syncs)
	}
}

// TestBackgroundSyncFailureCounted fails the background sync of a written
// record and checks the hook and the status counter.
func TestBackgroundSyncFailureCounted(t *testing.T) {
	ctx := testCtx(t)
	fault := segmentFault(errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo)
	var seen syncSeen
	l := mustOpen(t, errorfs.Wrap(vfs.NewMem(), fault), "log", Options{BackgroundSyncInterval: time.Millisecond,
		SyncBytesThreshold: -1, OnSync: seen.observe, Logger: slog.New(slog.DiscardHandler)})
	defer l.Close()
	fault.On()
	res, err := l.Append(ctx, entries(0, 1, 64), AfterFlush)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.WaitDurable(ctx, res.Next); err == nil {
		t.Fatal("durable frontier reached with syncs failing")
	}
	st := l.Status()
	if !st.Latched || st.BackgroundSyncFailures != 1 {
		t.Fatalf("latched %v, background sync failures %d; want latched, 1", st.Latched, st.BackgroundSyncFailures)
	}
	if _, errs := seen.counts(); errs != 1 {
		t.Fatalf("hook saw %d failed syncs, want 1", errs)
	}
}

// TestTailCacheCounters checks that every record read counts as a hit or
// a miss, and that with the cache off every read is a miss.
func TestTailCacheCounters(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cache int64
	}{{"cache-on", 64 << 10}, {"cache-off", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			l := mustOpen(t, vfs.NewMem(), "log", Options{TailCacheBytes: tc.cache, Logger: slog.New(slog.DiscardHandler)})
			defer l.Close()
			if _, err := l.Append(ctx, entries(0, 10, 64), AfterFsync); err != nil {
				t.Fatal(err)
			}
			if recs := readAll(t, l, true); len(recs) != 10 {
				t.Fatalf("read %d records, want 10", len(recs))
			}
			st := l.Status()
			if st.TailCacheHits+st.TailCacheMisses != 10 {
				t.Fatalf("hits %d + misses %d, want 10 records", st.TailCacheHits, st.TailCacheMisses)
			}
			if tc.cache < 0 && st.TailCacheMisses != 10 {
				t.Fatalf("cache off: %d misses, want 10", st.TailCacheMisses)
			}
		})
	}
}
