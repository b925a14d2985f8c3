package appliance

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// DiskInfo is the data directory's disk as Broker.Disk measured it, with
// the limits the publish path enforces.
type DiskInfo struct {
	// DataDir is the data directory: made absolute on the operating
	// system's file system, as configured otherwise.
	DataDir string
	// FreeBytes is the space the process may still use on the data
	// directory's file system, TotalBytes its size; both valid only when
	// FreeKnown.
	FreeBytes, TotalBytes int64
	FreeKnown             bool
	// UsedByDataBytes is what the files under the data directory take;
	// valid only when UsedKnown.
	UsedByDataBytes int64
	UsedKnown       bool
	// BudgetBytes is Options.DiskBudgetBytes (0: no budget); MinFreeBytes
	// the free-space watermark (0: off).
	BudgetBytes, MinFreeBytes int64
	// Refusal is why publishes are refused now (wrapping ErrDiskFull), or
	// nil while they are accepted.
	Refusal error
	// Err is what could not be measured, or nil. A figure that could not
	// be measured is not known; Refusal then uses the last known one, as
	// the publish path does.
	Err error
}

// Disk measures the data directory's disk now: the file system's free
// space and what the data directory holds. It does not fail: what cannot
// be measured is reported in DiskInfo.Err. The figures also refresh the
// ones the publish path's disk guard checks against.
func (b *Broker) Disk() DiskInfo { return b.disk.info() }

func (g *diskGuard) info() DiskInfo {
	in := DiskInfo{DataDir: g.dir, BudgetBytes: g.budget, MinFreeBytes: max(g.minFree, 0)}
	if g.fs == vfs.Default && !filepath.IsAbs(g.dir) {
		if abs, err := filepath.Abs(g.dir); err == nil {
			in.DataDir = abs
		}
	}
	// Measure outside the lock: walking a large data directory must not
	// hold up publishes.
	at := time.Now()
	var errs []error
	if u, err := g.fs.GetDiskUsage(g.dir); err != nil {
		errs = append(errs, fmt.Errorf("free space: %w", err))
	} else {
		in.FreeBytes, in.TotalBytes, in.FreeKnown = int64(u.AvailBytes), int64(u.TotalBytes), true
	}
	if used, err := dirSize(g.fs, g.dir); err != nil {
		errs = append(errs, fmt.Errorf("data directory size: %w", err))
	} else {
		in.UsedByDataBytes, in.UsedKnown = used, true
	}
	in.Err = errors.Join(errs...)

	g.mu.Lock()
	defer g.mu.Unlock()
	if at.After(g.measured) { // unless a publish measured meanwhile
		g.measured = at
		if in.FreeKnown {
			g.free, g.freeKnown = in.FreeBytes, true
		}
		if in.UsedKnown {
			g.used = in.UsedByDataBytes
		}
	}
	in.Refusal = g.refusalLocked(1)
	return in
}
