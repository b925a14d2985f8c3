package appliance

import (
	"fmt"
	"sync"
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

	mu       sync.Mutex // guards the fields below
	measured time.Time
	used     int64
	free     int64
	err      error
}

const diskMeasureEvery = time.Second

func (b *Broker) checkDisk(n int64) error { return b.disk.check(n) }

func (g *diskGuard) check(n int64) error {
	if g.budget <= 0 && g.minFree <= 0 {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Since(g.measured) > diskMeasureEvery {
		g.measure()
	}
	if g.err != nil {
		return fmt.Errorf("%w: cannot measure disk: %w", ErrDiskFull, g.err)
	}
	if g.budget > 0 && g.used+n > g.budget {
		return fmt.Errorf("%w: data directory holds %d bytes, budget %d", ErrDiskFull, g.used, g.budget)
	}
	if g.minFree > 0 && g.free-n < g.minFree {
		return fmt.Errorf("%w: %d bytes free, watermark %d", ErrDiskFull, g.free, g.minFree)
	}
	g.used += n // until the next measurement
	g.free -= n
	return nil
}

func (g *diskGuard) measure() {
	g.measured = time.Now()
	g.err = nil
	if g.minFree > 0 {
		u, err := g.fs.GetDiskUsage(g.dir)
		if err != nil {
			g.err = err
			return
		}
		g.free = int64(u.AvailBytes)
	}
	if g.budget > 0 {
		used, err := dirSize(g.fs, g.dir)
		if err != nil {
			g.err = err
			return
		}
		g.used = used
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
