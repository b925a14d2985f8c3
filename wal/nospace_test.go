package wal

import (
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// A full disk (or a full quota) at rollover refuses the append with
// ErrNoSpace and leaves the log healthy: nothing was written, and appends
// resume once space is free.
func TestNoSpaceAtRollover(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT} {
		t.Run(errno.Error(), func(t *testing.T) { testNoSpaceAtRollover(t, errno) })
	}
}

func testNoSpaceAtRollover(t *testing.T, errno syscall.Errno) {
	ctx := testCtx(t)
	var full atomic.Bool
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && op.Kind == errorfs.OpCreate && strings.HasSuffix(op.Path, segmentSuffix) {
			return errno
		}
		return nil
	}))
	l := mustOpen(t, fs, "log", Options{SegmentSize: 4 << 10})
	defer l.Close()
	n := 0
	for l.Status().Segments == 1 {
		if _, err := l.Append(ctx, entries(n, 1, 200), AfterFsync); err != nil {
			t.Fatal(err)
		}
		n++
	}
	// Fill the second segment up to the point where the next append rolls.
	seg := l.Status().Segments
	full.Store(true)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		if _, err = l.Append(ctx, entries(n, 1, 200), AfterFlush); err == nil {
			n++
		}
	}
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, errno) {
		t.Fatalf("append at a full rollover: %v", err)
	}
	st := l.Status()
	if st.Latched || st.Segments != seg || st.WrittenNext != uint64(n) {
		t.Fatalf("after no-space: latched %v segments %d written %d (want %d, %d)", st.Latched, st.Segments, st.WrittenNext, seg, n)
	}
	full.Store(false)
	if _, err := l.Append(ctx, entries(n, 1, 200), AfterFsync); err != nil {
		t.Fatalf("append after space freed: %v", err)
	}
	n++
	recs := readAll(t, l, true)
	if len(recs) != n {
		t.Fatalf("read %d records, want %d", len(recs), n)
	}
	for i, r := range recs {
		if string(r.Payload) != string(payload(i, 200)) {
			t.Fatalf("record %d differs", i)
		}
	}
}

// A full disk that fails the new segment's header write (the file was
// created, no block is left for its first bytes) refuses the append with
// ErrNoSpace and leaves no empty segment file behind.
func TestNoSpaceForSegmentHeader(t *testing.T) {
	ctx := testCtx(t)
	var full atomic.Bool
	mem := vfs.NewMem()
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && op.Kind == errorfs.OpFileWriteAt && op.Offset == 0 && strings.HasSuffix(op.Path, segmentSuffix) {
			return syscall.ENOSPC
		}
		return nil
	}))
	l := mustOpen(t, fs, "log", Options{SegmentSize: 4 << 10})
	defer l.Close()
	full.Store(true)
	n := 0
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		if _, err = l.Append(ctx, entries(n, 1, 200), AfterFsync); err == nil {
			n++
		}
	}
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("append at a full rollover: %v", err)
	}
	names, err := mem.List("log")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if !strings.HasSuffix(name, segmentSuffix) {
			continue
		}
		if info, err := mem.Stat(mem.PathJoin("log", name)); err != nil || info.Size() == 0 {
			t.Fatalf("segment %s after the refused rollover: %v, %v", name, info, err)
		}
	}
	if st := l.Status(); st.Latched || st.Segments != 1 {
		t.Fatalf("after no-space: latched %v, %d segments", st.Latched, st.Segments)
	}
	full.Store(false)
	if _, err := l.Append(ctx, entries(n, 1, 200), AfterFsync); err != nil {
		t.Fatalf("append after space freed: %v", err)
	}
}
