package appliance

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// With less than metaReserveBytes free, metadata writes are refused with
// ErrDiskFull before they reach Pebble (which would panic on a failed log
// write): a declaration and the settings, which free nothing, always; a
// checkpoint's snapshot and a deletion, which free space, spend the data
// directory's reserve once (reserve.go) and are refused as well when
// there is no room even so, until there is room again. Publishes to an existing queue go
// on while its log has room and the reserve is whole.
func TestMetadataWritesKeepAReserve(t *testing.T) {
	ctx := testCtx(t)
	fs := &usageFS{FS: vfs.NewMem()}
	fs.free.Store(1 << 30)
	b := openBroker(t, fs, "data", Options{MinFreeBytes: -1})
	defer func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	}()
	declare(t, ctx, b, QueueConfig{Name: "q"})
	fs.free.Store(metaReserveBytes - 1)
	if _, err := b.Declare(ctx, QueueConfig{Name: "other"}); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("declare with %d bytes free: %v, want ErrDiskFull", metaReserveBytes-1, err)
	}
	if err := b.UpdateSettings(DefaultSettings()); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("settings with %d bytes free: %v, want ErrDiskFull", metaReserveBytes-1, err)
	}
	publish(t, ctx, b, "q", Message{Body: body(0)})
	// The checkpoint spends the reserve, which gives it room.
	if err := b.Checkpoint(ctx); err != nil {
		t.Fatalf("checkpoint with %d bytes free and the reserve whole: %v", metaReserveBytes-1, err)
	}
	if _, ok, err := b.meta.snapshot("q", 0); err != nil || !ok {
		t.Fatalf("no snapshot from the reserve's room: %v %v", ok, err)
	}
	if _, err := b.Publish(ctx, "q", Message{Body: body(1)}); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("publish with the reserve spent: %v, want ErrDiskFull", err)
	}
	fs.free.Store(-reserveBytes) // the reserve's room taken by something else
	if err := b.DeleteQueue(ctx, "q"); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("delete with no room at all: %v, want ErrDiskFull", err)
	}
	fs.free.Store(reserveRecreateFree)
	publish(t, ctx, b, "q", Message{Body: body(2)})
	declare(t, ctx, b, QueueConfig{Name: "other"})
	if _, err := fs.Stat("data/" + reserveName); err != nil {
		t.Fatalf("the reserve is not made anew once there is room: %v", err)
	}
}
