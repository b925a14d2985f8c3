package appliance

import (
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// A declare whose first segments would not fit the disk budget is
// refused as disk full before anything is created.
func TestDeclareRespectsTheDiskBudget(t *testing.T) {
	ctx := testCtx(t)
	fs := vfs.NewMem()
	b := openBroker(t, fs, "data", Options{SegmentSize: 4 << 20, DiskBudgetBytes: 6 << 20, MinFreeBytes: -1})
	defer b.Close()
	declare(t, ctx, b, QueueConfig{Name: "fits", Durability: Durable})
	_, err := b.Declare(ctx, QueueConfig{Name: "too-big", Durability: Durable, Partitions: 4})
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("declare of 4 segments of 4 MiB under a 6 MiB budget holding one: %v, want disk full", err)
	}
	if _, err := fs.Stat("data/queues/too-big"); err == nil {
		t.Fatal("the refused declare created the queue's directory")
	}
	for _, name := range b.QueueNames() {
		if name == "too-big" {
			t.Fatal("the refused queue is listed")
		}
	}
}

// A declare that fails while it opens its partitions leaves nothing
// behind: no declaration that a restart would show as a failed queue, no
// logs.
func TestFailedDeclareLeavesNothing(t *testing.T) {
	ctx := testCtx(t)
	mem := vfs.NewMem()
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpCreate && strings.HasPrefix(op.Path, "data/queues/broken/1/") {
			return errors.New("injected: no room for the segment")
		}
		return nil
	}))
	b := openBroker(t, fs, "data", Options{Logger: quietLogger()})
	if _, err := b.Declare(ctx, QueueConfig{Name: "broken", Durability: Durable, Partitions: 2}); err == nil {
		t.Fatal("declare succeeded with its second partition's segment failing")
	}
	if _, err := mem.Stat("data/queues/broken"); err == nil {
		t.Fatal("the failed declare left the queue's logs")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openBroker(t, mem, "data", Options{})
	defer b.Close()
	if errs := b.QueueErrors(); len(errs) != 0 {
		t.Fatalf("after a restart: failed queues %v", errs)
	}
	if names := b.QueueNames(); len(names) != 0 {
		t.Fatalf("after a restart: queues %v", names)
	}
}
