package appliance

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Publishes are refused with ErrDiskFull, and counted, before the data
// directory passes its budget or the file system its free-space watermark;
// nothing confirmed is lost, and consumers still drain the queue.
func TestDiskLimitsRefuseBeforeTheDiskFills(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		fs   func() vfs.FS
	}{
		{"budget", Options{DiskBudgetBytes: 256 << 10, MinFreeBytes: -1}, func() vfs.FS { return vfs.NewMem() }},
		// Small segments: a declare needs room for its first one.
		{"free-space watermark", Options{MinFreeBytes: 64 << 20, SegmentSize: 64 << 10}, func() vfs.FS {
			fs := vfs.NewMem()
			fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 64<<20 + 100<<10, TotalBytes: 1 << 30})
			return fs
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			opts := tc.opts
			opts.FS, opts.DataDir = tc.fs(), "data"
			if opts.DiskBudgetBytes > 0 {
				// The budget counts what the data directory holds: start it
				// above what an empty broker with the queue takes.
				b := openBroker(t, opts.FS, opts.DataDir, Options{})
				if _, err := b.Declare(ctx, QueueConfig{Name: "q"}); err != nil {
					t.Fatal(err)
				}
				if err := b.Close(); err != nil {
					t.Fatal(err)
				}
				base, err := dirSize(opts.FS, opts.DataDir)
				if err != nil {
					t.Fatal(err)
				}
				opts.DiskBudgetBytes += base
			}
			b, err := Open(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if _, err := b.Declare(ctx, QueueConfig{Name: "q"}); err != nil {
				t.Fatal(err)
			}
			msg := make([]byte, 1024)
			confirmed := 0
			for ; confirmed < 10_000; confirmed++ {
				_, err = b.Publish(ctx, "q", Message{Body: msg})
				if err != nil {
					break
				}
			}
			if !errors.Is(err, ErrDiskFull) {
				t.Fatalf("after %d publishes: %v, want ErrDiskFull", confirmed, err)
			}
			if confirmed == 0 || confirmed > 400 {
				t.Fatalf("refused after %d KiB", confirmed)
			}
			info := mustInfo(t, b, "q")
			if info.Counters.RejectedDisk == 0 || info.Messages != int64(confirmed) {
				t.Fatalf("counters %+v, %d messages, %d confirmed", info.Counters, info.Messages, confirmed)
			}
			c := newCollector()
			sub, err := b.Subscribe("q", SubscribeOptions{Prefetch: 100, Deliver: c.deliver})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			for i := 0; i < confirmed; i++ {
				if err := sub.Ack(c.next(t, ctx).Tag); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
