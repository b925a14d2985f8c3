package appliance

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Disk reports the file system's figures, what the data directory holds,
// the limits, and whether publishes are refused; a file system without
// statfs is an error field, not a failure.
func TestDiskReportsFiguresAndRefusal(t *testing.T) {
	fs := vfs.NewMem()
	fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 100 << 20, TotalBytes: 1 << 30})
	b := openBroker(t, fs, "data", Options{MinFreeBytes: 64 << 20})
	defer b.Close()

	d := b.Disk()
	if d.Err != nil || !d.FreeKnown || !d.UsedKnown {
		t.Fatalf("disk %+v: want every figure measured", d)
	}
	if d.DataDir != "data" || d.FreeBytes != 100<<20 || d.TotalBytes != 1<<30 || d.MinFreeBytes != 64<<20 || d.BudgetBytes != 0 {
		t.Fatalf("disk %+v", d)
	}
	if want, _ := dirSize(fs, "data"); d.UsedByDataBytes != want || want == 0 {
		t.Fatalf("used by data %d, want %d (> 0)", d.UsedByDataBytes, want)
	}
	if d.Refusal != nil {
		t.Fatalf("refusing with 100 MiB free over a 64 MiB watermark: %v", d.Refusal)
	}

	// Below the watermark: Disk says so, and its fresh figure is the one
	// the publish path refuses on at once.
	fs.TestingSetDiskUsage(vfs.DiskUsage{AvailBytes: 10 << 20, TotalBytes: 1 << 30})
	if d = b.Disk(); !errors.Is(d.Refusal, ErrDiskFull) {
		t.Fatalf("10 MiB free under a 64 MiB watermark: refusal %v", d.Refusal)
	}
	if err := b.checkDisk(1); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("publish path after Disk: %v, want ErrDiskFull", err)
	}

	// No statfs: an error field, the rest still measured.
	nostat := openBroker(t, vfs.NewMem(), "data", Options{DiskBudgetBytes: 1})
	defer nostat.Close()
	d = nostat.Disk()
	if d.Err == nil || d.FreeKnown || !d.UsedKnown || d.MinFreeBytes != 0 {
		t.Fatalf("disk without statfs %+v: want an error, no free figure, the data size", d)
	}
	if !errors.Is(d.Refusal, ErrDiskFull) {
		t.Fatalf("data over a 1-byte budget: refusal %v", d.Refusal)
	}
}
