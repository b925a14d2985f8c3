package appliance

import (
	"errors"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/fibril-edge/fibril/internal/await"
)

// On a full disk an ack whose record finds no room for a new segment
// still settles the message: in memory, and in the checkpoint that
// follows. Before, the message stayed settling for good, neither ready
// nor settled, so no checkpoint could pass it and no space was freed.
func TestAckOnAFullDiskSettles(t *testing.T) {
	ctx := testCtx(t)
	var full atomic.Bool
	mem := vfs.NewMem()
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && op.Kind == errorfs.OpCreate && strings.HasSuffix(op.Path, ".seg") {
			return syscall.ENOSPC
		}
		return nil
	}))
	lg, buf := capturingLogger()
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(buf.String())
		}
	})
	b := openBroker(t, fs, "data", Options{SegmentSize: 64 << 10, Logger: lg, CheckpointDelay: time.Millisecond})
	declare(t, ctx, b, QueueConfig{Name: "q", Durability: Durable})
	full.Store(true)
	published := 0
	for ; ; published++ {
		if _, err := b.Publish(ctx, "q", Message{Body: make([]byte, 1000)}); err != nil {
			if !errors.Is(err, ErrDiskFull) {
				t.Fatalf("publish %d: %v, want disk full", published, err)
			}
			break
		}
	}
	c := newCollector()
	sub, err := b.Subscribe("q", SubscribeOptions{Prefetch: 1000, Deliver: c.deliver})
	if err != nil {
		t.Fatal(err)
	}
	for range published {
		if err := sub.Ack(c.next(t, ctx).Tag); err != nil {
			t.Fatal(err)
		}
	}
	await.Until(t, ctx, "every acked message settled", func() bool { return mustInfo(t, b, "q").Messages == 0 })
	sub.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// The checkpoint holds the settles the log could not: nothing comes back.
	full.Store(false)
	b = openBroker(t, fs, "data", Options{Logger: quietLogger()})
	defer b.Close()
	if n := mustInfo(t, b, "q").Messages; n != 0 {
		t.Fatalf("%d of %d acked messages back after a restart", n, published)
	}
}

// usageFS reports as free a fixed figure plus whatever the data
// directory's reserve file would give back once removed: a disk that is
// full but for the reserve.
type usageFS struct {
	vfs.FS
	free atomic.Int64
}

func (f *usageFS) GetDiskUsage(string) (vfs.DiskUsage, error) {
	avail := f.free.Load()
	if _, err := f.FS.Stat("data/" + reserveName); err != nil {
		avail += reserveBytes
	}
	return vfs.DiskUsage{AvailBytes: uint64(avail), TotalBytes: 1 << 30}, nil
}

// The reserve: made at open while there is room; on a full disk a
// checkpoint or a delete spends it to make the room its metadata write
// needs, publishes are then refused until there is room again, and the
// reserve is made anew then. A declaration (which frees nothing) never
// spends it.
func TestReserveMakesRoomToFreeSpace(t *testing.T) {
	ctx := testCtx(t)
	fs := &usageFS{FS: vfs.NewMem()}
	fs.free.Store(1 << 30)
	b := openBroker(t, fs, "data", Options{MinFreeBytes: -1, SegmentSize: 64 << 10})
	defer b.Close()
	if info, err := fs.Stat("data/" + reserveName); err != nil || info.Size() != reserveBytes {
		t.Fatalf("reserve after open: %v %v, want %d bytes", info, err, reserveBytes)
	}
	declare(t, ctx, b, QueueConfig{Name: "q", Durability: Durable})
	declare(t, ctx, b, QueueConfig{Name: "after", Durability: Durable})
	publish(t, ctx, b, "q", Message{Body: []byte("m")})

	fs.free.Store(1 << 20) // full: less than a metadata write leaves untouched
	if _, err := b.Declare(ctx, QueueConfig{Name: "other"}); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("declare on a full disk: %v, want disk full", err)
	}
	if _, err := fs.Stat("data/" + reserveName); err != nil {
		t.Fatal("a declaration spent the reserve")
	}
	if err := b.DeleteQueue(ctx, "q"); err != nil {
		t.Fatalf("delete on a full disk: %v", err)
	}
	if _, err := fs.Stat("data/" + reserveName); err == nil {
		t.Fatal("the delete did not spend the reserve")
	}
	// Publishes are refused now, even with room for them, until there is
	// room for the reserve too.
	fs.free.Store(reserveRecreateFree - reserveBytes - 1) // with the reserve gone: just short
	if _, err := b.Publish(ctx, "after", Message{Body: []byte("m")}); !errors.Is(err, ErrDiskFull) ||
		!strings.Contains(err.Error(), "reserve") {
		t.Fatalf("publish while the reserve is spent: %v", err)
	}
	fs.free.Store(reserveRecreateFree)
	publish(t, ctx, b, "after", Message{Body: []byte("m")})
	if info, err := fs.Stat("data/" + reserveName); err != nil || info.Size() != reserveBytes {
		t.Fatalf("reserve once there is room: %v %v", info, err)
	}
}
