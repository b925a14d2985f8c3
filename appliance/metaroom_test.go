package appliance

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// With less than metaReserveBytes free, metadata writes are refused with
// ErrDiskFull before they reach Pebble (which would panic on a failed log
// write): a declaration, the settings, a deletion (which leaves the queue
// serving), and a checkpoint's snapshot, which is deferred and stored once
// space returns. Publishes to an existing queue go on while its log has
// room.
func TestMetadataWritesKeepAReserve(t *testing.T) {
	ctx := testCtx(t)
	fs := vfs.NewMem()
	fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 1 << 30, TotalBytes: 2 << 30})
	b := openBroker(t, fs, "data", Options{MinFreeBytes: -1})
	defer func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	}()
	declare(t, ctx, b, QueueConfig{Name: "q"})
	fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: metaReserveBytes - 1, TotalBytes: 2 << 30})
	if _, err := b.Declare(ctx, QueueConfig{Name: "other"}); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("declare with %d bytes free: %v, want ErrDiskFull", metaReserveBytes-1, err)
	}
	if err := b.UpdateSettings(DefaultSettings()); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("settings with %d bytes free: %v, want ErrDiskFull", metaReserveBytes-1, err)
	}
	if err := b.DeleteQueue(ctx, "q"); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("delete with %d bytes free: %v, want ErrDiskFull", metaReserveBytes-1, err)
	}
	publish(t, ctx, b, "q", Message{Body: body(0)})
	if err := b.Checkpoint(ctx); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("checkpoint with %d bytes free: %v, want ErrDiskFull", metaReserveBytes-1, err)
	}
	if _, ok, err := b.meta.snapshot("q", 0); err != nil || ok {
		t.Fatalf("a snapshot was stored on a full disk: %v %v", ok, err)
	}
	fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: metaReserveBytes, TotalBytes: 2 << 30})
	if err := b.Checkpoint(ctx); err != nil {
		t.Fatalf("checkpoint once space returned: %v", err)
	}
	if _, ok, err := b.meta.snapshot("q", 0); err != nil || !ok {
		t.Fatalf("no snapshot after space returned: %v %v", ok, err)
	}
	declare(t, ctx, b, QueueConfig{Name: "other"})
}
