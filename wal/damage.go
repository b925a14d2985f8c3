package wal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Damaged ranges. A scan that resyncs past a bad record (resync.go) leaves
// a Damage: the bytes between the bad record and the next valid one, and
// the offsets they held. The bytes stay where they are and a copy goes to
// a file beside the segment,
//
//	<base>.seg.<from>-<to>.damaged
//
// never deleted. The offsets [from, to) become a hole: reads there fail
// with a *HoleError, and LostRecords counts them. A sealed segment's holes
// are found again at every open from those files; the active segment's by
// its scan.

const damagedSuffix = ".damaged"

// Damage is a range of a segment whose bytes hold no valid record, with
// valid records after it (or, in a sealed segment, the segment's end).
type Damage struct {
	Segment  uint64 // base offset of the segment file
	Pos, End int64  // the damaged bytes, [Pos, End)
	From, To uint64 // the offsets they held, [From, To): lost
	Reason   string // why the record at Pos did not verify
}

// Lost is the number of records the damage took.
func (d Damage) Lost() uint64 { return d.To - d.From }

// Err is the corruption at the start of the damage.
func (d Damage) Err() *CorruptionError {
	return &CorruptionError{Segment: d.Segment, Pos: d.Pos, Offset: d.From, Reason: d.Reason}
}

func (d Damage) String() string {
	return fmt.Sprintf("segment %020d bytes %d to %d (offsets %d to %d, %d records lost): %s",
		d.Segment, d.Pos, d.End, d.From, d.To, d.Lost(), d.Reason)
}

func damagedName(d Damage) string {
	return fmt.Sprintf("%s.%d-%d%s", segmentName(d.Segment), d.From, d.To, damagedSuffix)
}

// parseDamagedName returns the segment and the offsets a damaged-range
// file's name carries.
func parseDamagedName(name string) (seg, from, to uint64, ok bool) {
	rest, ok := strings.CutSuffix(name, damagedSuffix)
	if !ok || len(rest) < 20+len(segmentSuffix)+1 {
		return 0, 0, 0, false
	}
	segName, span := rest[:20+len(segmentSuffix)], rest[20+len(segmentSuffix):]
	if seg, ok = parseSegmentName(segName); !ok || !strings.HasPrefix(span, ".") {
		return 0, 0, 0, false
	}
	a, b, ok := strings.Cut(span[1:], "-")
	if !ok {
		return 0, 0, 0, false
	}
	from, err1 := strconv.ParseUint(a, 10, 64)
	to, err2 := strconv.ParseUint(b, 10, 64)
	if err1 != nil || err2 != nil || to < from {
		return 0, 0, 0, false
	}
	return seg, from, to, true
}

// keepDamage copies the damaged bytes of seg (read through r) to their file
// beside it, unless an earlier open did, and returns the hole they leave.
// The copy is written to a temporary, synced, renamed and the directory
// synced, so it is whole when it exists.
func (l *Log) keepDamage(r io.ReaderAt, d Damage) (Hole, error) {
	name := damagedName(d)
	hole := Hole{From: d.From, To: d.To, Path: l.fs.PathJoin(l.dir, name)}
	if _, err := l.fs.Stat(hole.Path); err == nil {
		return hole, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return hole, fmt.Errorf("wal: stat %s: %w", name, err)
	}
	b := make([]byte, d.End-d.Pos)
	if n, err := r.ReadAt(b, d.Pos); err != nil && !errors.Is(err, io.EOF) {
		return hole, fmt.Errorf("wal: read damaged range of segment %d at %d: %w", d.Segment, d.Pos, err)
	} else {
		b = b[:n]
	}
	tmp := hole.Path + tmpSuffix
	f, err := l.fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return hole, fmt.Errorf("wal: create %s: %w", name, err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = l.fs.Rename(tmp, hole.Path)
	}
	if err == nil {
		err = l.dirFile.Sync()
	}
	if err != nil {
		return hole, fmt.Errorf("wal: keep damaged range in %s: %w", name, err)
	}
	return hole, nil
}

// registerDamage keeps each damaged range of seg and turns the offsets it
// lost into a hole. A copy that cannot be written is logged: the hole
// stands all the same (its Path then names the segment), since the bytes
// are still in the segment.
func (l *Log) registerDamage(r io.ReaderAt, path string, damage []Damage) []Hole {
	l.damageMu.Lock()
	defer l.damageMu.Unlock()
	var holes []Hole
	for _, d := range damage {
		hole, err := l.keepDamage(r, d)
		if err != nil {
			l.opts.Logger.Error("wal: damaged range could not be copied aside", "dir", l.dir, "damage", d.String(), "err", err)
			hole.Path = path
		}
		l.opts.Logger.Error("wal: damaged records quarantined; the records after them are kept",
			"dir", l.dir, "damage", d.String(), "copy", hole.Path)
		if d.Lost() > 0 {
			holes = append(holes, hole)
		}
	}
	l.segMu.Lock()
	l.addHolesLocked(holes)
	if len(holes) > 0 {
		l.forgetReads() // before any reader can see the holes
	}
	l.segMu.Unlock()
	return holes
}

// addHolesLocked adds holes not already known; the caller holds segMu.
func (l *Log) addHolesLocked(holes []Hole) {
	for _, h := range holes {
		known := false
		for _, k := range l.holes {
			known = known || (k.From == h.From && k.To == h.To)
		}
		if !known {
			l.holes = append(l.holes, h)
		}
	}
	l.holesChangedLocked()
}

// holesChangedLocked sorts the holes after a change and notes whether
// there are any; the caller holds segMu for writing.
func (l *Log) holesChangedLocked() {
	sort.Slice(l.holes, func(a, b int) bool { return l.holes[a].From < l.holes[b].From })
	l.anyHoles.Store(len(l.holes) > 0)
}

// boundByHoles is where a read from offset meets a hole: a *HoleError if
// offset is in one, else limit cut at the first hole above offset. The
// caches a read consults first still hold the records of a range lost
// since they were filled (the tail window, a read-ahead chunk under way,
// a block offered since), so the read asks here before it asks them.
func (l *Log) boundByHoles(offset, limit uint64) (uint64, error) {
	if !l.anyHoles.Load() {
		return limit, nil
	}
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	for _, h := range l.holes {
		if offset >= h.From && offset < h.To {
			return 0, &HoleError{Hole: h}
		}
		if h.From > offset {
			return min(limit, h.From), nil // sorted: the first above is the nearest
		}
	}
	return limit, nil
}

// LostRecords is how many records the log has lost to damage: the offsets
// in its holes, damaged ranges and quarantined segments alike. Reads there
// fail with a *HoleError; every other record serves.
func (l *Log) LostRecords() uint64 {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	var n uint64
	for _, h := range l.holes {
		n += h.To - h.From
	}
	return n
}

// damagedHoles turns the damaged-range files of sealed segments into holes.
// sealed holds the sealed segments' bases, sorted, and ends their ranges:
// sealed[i] ends where ends[i] says. Files of other segments (the active
// one, whose scan finds its damage again, or segments a cut removed) are
// left alone.
func damagedHoles(names []string, dir string, join func(...string) string, sealed, ends []uint64) []Hole {
	var holes []Hole
	for _, name := range names {
		seg, from, to, ok := parseDamagedName(name)
		if !ok || to == from {
			continue
		}
		i := sort.Search(len(sealed), func(i int) bool { return sealed[i] >= seg })
		if i == len(sealed) || sealed[i] != seg || from < seg || to > ends[i] {
			continue
		}
		holes = append(holes, Hole{From: from, To: to, Path: join(dir, name)})
	}
	return holes
}
