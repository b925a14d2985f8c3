package appliance

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// diskGuard refuses publishes before the disk fills: past the data
// directory's budget, or below the free-space watermark. It measures at
// most once a second, and only when publishes ask.
type diskGuard struct {
	fs      vfs.FS
	dir     string
	budget  int64
	minFree int64

	// spent: the reserve went to a metadata write that frees space
	// (reserve.go). Read lock-free on the publish path; changed under mu.
	spent atomic.Bool

	mu        sync.Mutex // guards the fields below
	measured  time.Time
	used      int64
	free      int64
	freeKnown bool
	warned    bool
	log       *slog.Logger
}

const diskMeasureEvery = time.Second

func (b *Broker) checkDisk(n int64) error { return b.disk.check(n) }

func (g *diskGuard) check(n int64) error {
	limits := g.budget > 0 || g.minFree > 0
	if !limits && !g.spent.Load() {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if limits {
		if time.Since(g.measured) > diskMeasureEvery {
			g.measure()
		}
		if err := g.refusalLocked(n); err != nil {
			return err
		}
	}
	if err := g.reserveRefusalLocked(); err != nil {
		return err
	}
	g.used += n // until the next measurement
	g.free -= n
	return nil
}

// metaReserveBytes is the free space a metadata write leaves untouched:
// room for the Pebble log to grow by a preallocation step (110% of its
// 2 MiB memtable), start a new log file and flush a memtable.
const metaReserveBytes = 8 << 20

// metaRoom refuses a metadata write (a declaration, the settings, a
// checkpoint's snapshot, a queue's deletion) with ErrDiskFull when the
// file system has less than metaReserveBytes free, unless the write
// frees space (a checkpoint, a deletion) and the data directory's reserve
// can make the room (reserve.go). Pebble treats a failed write to its log
// as fatal and panics, so a full disk must never meet one: a checkpoint
// refused here is retried after the next change, and the queue logs stay
// authoritative meanwhile. It measures afresh (one statfs) whatever the
// watermark and budget; a file system that cannot say lets the write
// through.
func (g *diskGuard) metaRoom(frees bool) error {
	u, err := g.fs.GetDiskUsage(g.dir)
	if err != nil || u.AvailBytes >= metaReserveBytes {
		return nil
	}
	if frees {
		// A checkpoint or a delete: the reserve (reserve.go) makes its
		// room, unless something else took that room as it was freed.
		g.mu.Lock()
		spent := g.spendReserveLocked()
		g.mu.Unlock()
		if spent {
			if u, err = g.fs.GetDiskUsage(g.dir); err != nil || u.AvailBytes >= metaReserveBytes {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: %d bytes free, metadata writes keep %d in reserve", ErrDiskFull, u.AvailBytes, metaReserveBytes)
}

// refusalLocked is why a publish of n bytes is refused on the figures at
// hand, or nil.
func (g *diskGuard) refusalLocked(n int64) error {
	if g.budget > 0 && g.used+n > g.budget {
		return fmt.Errorf("%w: data directory holds %d bytes, budget %d", ErrDiskFull, g.used, g.budget)
	}
	if g.minFree > 0 && g.freeKnown && g.free-n < g.minFree {
		return fmt.Errorf("%w: %d bytes free, watermark %d", ErrDiskFull, g.free, g.minFree)
	}
	return nil
}

// measure refreshes the figures. A figure that cannot be measured keeps its
// last value (and a watermark never measured does not refuse), with the
// failure logged once: a file system without statfs must not stop the
// broker.
func (g *diskGuard) measure() {
	g.measured = time.Now()
	var errs []error
	if g.minFree > 0 {
		if u, err := g.fs.GetDiskUsage(g.dir); err != nil {
			errs = append(errs, fmt.Errorf("free space: %w", err))
		} else {
			g.free, g.freeKnown = int64(u.AvailBytes), true
		}
	}
	if g.budget > 0 {
		if used, err := dirSize(g.fs, g.dir); err != nil {
			errs = append(errs, fmt.Errorf("data directory size: %w", err))
		} else {
			g.used = used
		}
	}
	if len(errs) > 0 && !g.warned {
		g.warned = true
		g.log.Warn("cannot measure disk use; the disk limits use the last known figures", "err", errs)
	}
}

// dirSize sums the sizes of the files under dir.
func dirSize(fs vfs.FS, dir string) (int64, error) {
	names, err := fs.List(dir)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, name := range names {
		path := fs.PathJoin(dir, name)
		info, err := fs.Stat(path)
		if err != nil {
			continue // removed meanwhile
		}
		if info.IsDir() {
			n, err := dirSize(fs, path)
			if err != nil {
				return 0, err
			}
			total += n
			continue
		}
		total += info.Size()
	}
	return total, nil
}
