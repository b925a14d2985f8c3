package wal

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Quarantine. A sealed segment found corrupt is renamed aside, never
// deleted: <base>.seg.quarantined. Its offsets become a hole: reads there
// fail with a *HoleError naming the hole, so a reader can skip to its end and
// serve what is intact. Holes are found again at every open from the
// quarantined files.

const quarantineSuffix = segmentSuffix + ".quarantined"

// ErrQuarantined is matched by every *HoleError.
var ErrQuarantined = errors.New("wal: offsets quarantined")

// Hole is a range of offsets whose segment was quarantined.
type Hole struct {
	From, To uint64 // [From, To)
	Path     string // where the quarantined file now is
}

// HoleError is returned by reads that start inside a hole.
type HoleError struct{ Hole Hole }

func (e *HoleError) Error() string {
	return fmt.Sprintf("wal: offsets %d to %d are quarantined in %s", e.Hole.From, e.Hole.To, e.Hole.Path)
}

// Is makes errors.Is(err, ErrQuarantined) true.
func (e *HoleError) Is(target error) bool { return target == ErrQuarantined }

func parseQuarantinedName(name string) (uint64, bool) {
	rest, ok := strings.CutSuffix(name, ".quarantined")
	if !ok {
		return 0, false
	}
	return parseSegmentName(rest)
}

// Quarantine renames the sealed segment starting at base aside and turns its
// offsets into a hole. The active segment cannot be quarantined: recovery
// truncates it at its first bad record instead.
func (l *Log) Quarantine(base uint64) (Hole, error) {
	select {
	case <-l.closing:
		return Hole{}, ErrClosed
	default:
	}
	l.segMu.Lock()
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].base >= base })
	if i >= len(l.segs) || l.segs[i].base != base {
		l.segMu.Unlock()
		return Hole{}, fmt.Errorf("wal: no segment starts at %d", base)
	}
	if i == len(l.segs)-1 {
		l.segMu.Unlock()
		return Hole{}, fmt.Errorf("wal: segment %d is active and cannot be quarantined", base)
	}
	seg := l.segs[i]
	hole := Hole{From: base, To: l.segs[i+1].base, Path: seg.path + ".quarantined"}
	if err := l.fs.Rename(seg.path, hole.Path); err != nil {
		l.segMu.Unlock()
		return Hole{}, fmt.Errorf("wal: quarantine segment %d: %w", base, err)
	}
	l.segs = append(l.segs[:i:i], l.segs[i+1:]...)
	l.holes = append(l.holes, hole)
	l.holesChangedLocked()
	l.forgetReads() // before any reader can see the hole
	l.segMu.Unlock()
	seg.removed.Store(true)
	seg.release()
	if err := l.dirFile.Sync(); err != nil {
		return hole, fmt.Errorf("wal: sync directory after quarantine: %w", err)
	}
	l.opts.Logger.Error("wal: segment quarantined", "dir", l.dir, "from", hole.From, "to", hole.To, "path", hole.Path)
	return hole, nil
}

// holeAtLocked returns the hole holding offset; the caller holds segMu.
func (l *Log) holeAtLocked(offset uint64) (Hole, bool) {
	for _, h := range l.holes {
		if offset >= h.From && offset < h.To {
			return h, true
		}
	}
	return Hole{}, false
}

// Holes lists the quarantined ranges.
func (l *Log) Holes() []Hole {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	return append([]Hole(nil), l.holes...)
}

// nextBase is where the sealed segment at base ends: the next segment or
// quarantined segment after it.
func nextBase(base, next uint64, quarantined []uint64) uint64 {
	for _, q := range quarantined {
		if q > base && q < next {
			next = q
		}
	}
	return next
}

// findHoles turns quarantined files into holes, each ending where the next
// segment (or quarantined segment) starts.
func findHoles(fs vfs.FS, dir string, quarantined, bases []uint64) []Hole {
	var holes []Hole
	for _, q := range quarantined {
		to := ^uint64(0)
		for _, b := range bases {
			if b > q && b < to {
				to = b
			}
		}
		to = nextBase(q, to, quarantined)
		if to == ^uint64(0) {
			continue // past the active segment: nothing there to read
		}
		holes = append(holes, Hole{From: q, To: to, Path: fs.PathJoin(dir, segmentName(q)+".quarantined")})
	}
	sort.Slice(holes, func(a, b int) bool { return holes[a].From < holes[b].From })
	return holes
}
