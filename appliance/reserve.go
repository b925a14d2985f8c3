package appliance

import (
	"errors"
	"fmt"
	"os"
)

// The reserve. Space must always be freeable: acks, checkpoints,
// retention and deletes must work on a full disk, and each of them but
// the ack needs a metadata write (a checkpoint's snapshot lets retention
// remove segments; a delete removes the declaration), which Pebble must
// never meet without room (it treats a failed log write as fatal). So the
// data directory keeps a reserve file of reserveBytes (twice the room a
// metadata write leaves untouched), created when there is plenty of room. On a full disk a metadata write that frees
// space (a checkpoint, a delete) removes the reserve to make the room it
// needs, and from then on publishes are refused as disk full, so that
// they cannot take that room back, until the disk has plenty of room
// again and the reserve is made anew. (CockroachDB keeps a ballast file
// for the same purpose.) Acks need no room: on a full disk a settle whose
// record cannot be appended is applied in memory, and the next checkpoint
// records it (until then a crash redelivers it, as at-least-once allows).

// reserveName is the reserve file in the data directory.
const reserveName = "reserve"

// reserveBytes is the reserve file's size: spent, it gives the metadata
// writes that free space their metaReserveBytes and as much again.
const reserveBytes = 2 * metaReserveBytes

// reserveRecreateFree is the free space at which a spent reserve is made
// anew: the reserve and twice the metadata room, so that making it does
// not fill the disk again.
const reserveRecreateFree = reserveBytes + 2*metaReserveBytes

// errReserveSpent refuses publishes while the reserve is spent.
var errReserveSpent = fmt.Errorf("%w: the disk filled and its reserve went to settles, checkpoints and deletes; "+
	"publishes resume once %d bytes are free", ErrDiskFull, reserveRecreateFree)

func (g *diskGuard) reservePath() string { return g.fs.PathJoin(g.dir, reserveName) }

// ensureReserveLocked makes the reserve file when it is missing and the
// disk has room for it, and reports whether the reserve is in place. A
// file system that cannot say how full it is gets none (nothing to guard).
func (g *diskGuard) ensureReserveLocked() bool {
	if _, err := g.fs.Stat(g.reservePath()); err == nil {
		return true
	}
	u, err := g.fs.GetDiskUsage(g.dir)
	if err != nil || u.AvailBytes < reserveRecreateFree {
		return false
	}
	// Written, not only preallocated: the file's size is the room it
	// holds, as the disk budget counts it.
	f, err := g.fs.Create(g.reservePath(), "reserve")
	if err == nil {
		zeros := make([]byte, 1<<20)
		for n := 0; err == nil && n < reserveBytes; n += len(zeros) {
			_, err = f.Write(zeros)
		}
		if err == nil {
			err = f.Sync()
		}
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		_ = g.fs.Remove(g.reservePath())
		g.log.Warn("cannot make the data directory's space reserve", "path", g.reservePath(), "err", err)
		return false
	}
	return true
}

// openReserve makes the reserve at open, when the disk has room for it.
// A disk without that room starts without one (and without refusing
// publishes for it: the watermark, min_free, is the operator's guard).
func (g *diskGuard) openReserve() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ensureReserveLocked() {
		return
	}
	if _, err := g.fs.GetDiskUsage(g.dir); err == nil {
		g.log.Warn("no room for the data directory's space reserve: on a full disk, checkpoints and deletes may not free space",
			"reserve_bytes", reserveBytes, "needs_free_bytes", reserveRecreateFree)
	}
}

// spendReserveLocked removes the reserve to make room for a metadata
// write that frees space, and refuses publishes from then on. It reports
// whether there was a reserve to spend.
func (g *diskGuard) spendReserveLocked() bool {
	if err := g.fs.Remove(g.reservePath()); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			g.log.Warn("cannot remove the data directory's space reserve", "path", g.reservePath(), "err", err)
		}
		return false
	}
	g.spent.Store(true)
	g.log.Warn("disk full: the space reserve is spent on a checkpoint or delete that frees space; publishes are refused until it is made anew",
		"reserve_bytes", reserveBytes, "resume_at_free_bytes", reserveRecreateFree)
	return true
}

// reserveRefusalLocked refuses a publish while the reserve is spent, and
// makes it anew (lifting the refusal) once the disk has room (one statfs
// per refused publish).
func (g *diskGuard) reserveRefusalLocked() error {
	if !g.spent.Load() {
		return nil
	}
	if g.ensureReserveLocked() {
		g.spent.Store(false)
		g.log.Info("disk has room again: the space reserve is made anew; publishes resume")
		return nil
	}
	return errReserveSpent
}
