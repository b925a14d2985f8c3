package wal

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// RecoveryReport says what Open found and what it repaired.
type RecoveryReport struct {
	Segments      int    // segment files after recovery
	ActiveSegment uint64 // base offset of the active segment
	ScannedBytes  int64  // bytes of the active segment validated
	End           uint64 // WrittenNext and DurableNext after recovery
	// Stop is the torn tail that ended the active segment's scan: a bad
	// record with nothing valid after it; nil when the scan ended cleanly.
	Stop *CorruptionError
	// Damaged lists the damaged ranges the active segment's scan skipped:
	// bad records with valid records after them. Their bytes are copied
	// aside, their offsets read as holes, and the records after them serve.
	Damaged []Damage
	// LostRecords counts the offsets in the log's holes after recovery:
	// the ranges in Damaged, damaged ranges found earlier in sealed
	// segments, and quarantined segments. A torn tail is not counted: its
	// records were never confirmed durable.
	LostRecords uint64
	// CutBytes is how many bytes past the valid end were cut or zeroed.
	CutBytes int64
	// LatchedCut is true when a latched-cut.pending marker was carried out,
	// cutting the log back to CutTo.
	LatchedCut      bool
	CutTo           uint64
	RemovedSegments []uint64 // segments removed by the cut
	// RewroteHeader is true when the active segment had no header (created
	// but never synced before a power loss) and got a fresh one.
	RewroteHeader bool
	// Corrupt lists sealed segments whose header did not verify; reads in
	// their range fail with their CorruptionError.
	Corrupt []*CorruptionError
	// Quarantined lists the holes left by quarantined segments.
	Quarantined []Hole
	// Incarnation is the log's incarnation after Open; NewIncarnation is
	// true when this Open started it (incarnation.go).
	Incarnation    uint64
	NewIncarnation bool
	Duration       time.Duration
}

const lockName = "LOCK"

// Open opens or creates the log in dir and carries out the recovery steps
// written down in doc.go before anything can read it.
func Open(dir string, opts Options) (*Log, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	start := time.Now()
	fs := opts.FS
	// Step 1: the directory and its lock.
	if err := MkdirAllSynced(fs, dir); err != nil {
		return nil, err
	}
	lock, err := lockDir(fs, dir, opts.LockInProcess)
	if err != nil {
		return nil, fmt.Errorf("wal: lock %s: %w: %w", dir, ErrLocked, err)
	}
	l := &Log{
		dir: dir, opts: opts, fs: fs, lock: lock, dirFile: dirSyncer{fs, dir},
		appendCh:   make(chan *Completion),
		ctlCh:      make(chan control),
		syncReq:    make(chan syncJob, 1),
		syncDone:   make(chan syncResult, 1),
		syncNote:   make(chan struct{}, 1),
		writerKick: make(chan struct{}, 1),
		closing:    make(chan struct{}),
		done:       make(chan struct{}),
		latched:    make(chan struct{}),

		scrubDone: make(chan struct{}),
	}
	active, pos, existed, err := l.recover()
	if err == nil {
		err = l.openIncarnation(existed) // step 9
	}
	if err != nil {
		for _, s := range l.segs {
			s.release()
		}
		_ = lock.Close()
		return nil, err
	}
	l.recovery.Duration = time.Since(start)
	l.readAhead = readAheadBytes(opts.TailCacheBytes)
	l.cacheGen.Store(nextCacheGen())
	l.readLow.Store(math.MaxUint64)
	if opts.TailCacheBytes > 0 {
		if l.cache, err = newTailCache(opts.TailCacheBytes); err != nil {
			l.closeFiles()
			return nil, err
		}
		if opts.ReadCache != nil {
			l.cache.leave = l.leaveTail
		}
	}
	w := &writer{
		l: l, opts: opts, next: l.written.load(),
		interval: opts.BackgroundSyncInterval, threshold: opts.SyncBytesThreshold,
		timer: time.NewTimer(time.Hour),
	}
	w.timer.Stop()
	w.setActive(active, pos)
	w.st.LastSync = time.Now() // recovery synced everything it kept
	w.publishStatus()
	l.w = w
	go l.runSyncer()
	go w.run()
	if opts.ScrubBytesPerSecond > 0 {
		go l.runScrub(opts.ScrubBytesPerSecond)
	} else {
		close(l.scrubDone)
	}
	return l, nil
}

// recover runs steps 2 to 8 and returns the active segment and its write
// position, and whether the directory held segments before it ran.
func (l *Log) recover() (*segment, int64, bool, error) {
	fs, rep := l.fs, &l.recovery
	// Step 2: list segments, drop temporaries, read the epoch.
	names, err := fs.List(l.dir)
	if err != nil {
		return nil, 0, false, fmt.Errorf("wal: list %s: %w", l.dir, err)
	}
	var bases, quarantined []uint64
	for _, name := range names {
		if base, ok := parseSegmentName(name); ok {
			bases = append(bases, base)
		} else if base, ok := parseQuarantinedName(name); ok {
			quarantined = append(quarantined, base)
		} else if strings.HasSuffix(name, tmpSuffix) {
			if err := fs.Remove(fs.PathJoin(l.dir, name)); err != nil {
				return nil, 0, false, fmt.Errorf("wal: remove leftover %s: %w", name, err)
			}
		}
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	existed := len(bases) > 0 || len(quarantined) > 0
	epoch, err := readEpoch(fs, l.dir)
	if err != nil {
		return nil, 0, false, err
	}
	l.epoch.Store(epoch)

	// Step 3: a pending latched cut removes the segments past its offset.
	cutTo, hasCut, err := pendingCut(fs, l.dir, existed)
	if err != nil {
		return nil, 0, false, err
	}
	limit := ^uint64(0)
	if hasCut {
		rep.LatchedCut, rep.CutTo, limit = true, cutTo, cutTo
		// Keep the segments that start at or below the cut; the last of them
		// is cut inside by step 6. With none, the log starts over at the cut.
		keep := sort.Search(len(bases), func(i int) bool { return bases[i] > cutTo })
		for _, base := range bases[keep:] {
			if err := fs.Remove(fs.PathJoin(l.dir, segmentName(base))); err != nil {
				return nil, 0, false, fmt.Errorf("wal: cut segment %d: %w", base, err)
			}
			rep.RemovedSegments = append(rep.RemovedSegments, base)
		}
		bases = bases[:keep]
		if err := l.dirFile.Sync(); err != nil {
			return nil, 0, false, fmt.Errorf("wal: sync directory after cut: %w", err)
		}
	}

	// A new log (or one cut to nothing) starts with an empty segment.
	if len(bases) == 0 {
		base := uint64(0)
		if hasCut {
			base = cutTo
		}
		seg, err := l.createSegment(base)
		if err != nil {
			return nil, 0, false, err
		}
		if err := l.syncNewSegment(seg); err != nil {
			seg.release()
			return nil, 0, false, err
		}
		l.segs, l.head = []*segment{seg}, base
		l.written.v.Store(base)
		l.durable.v.Store(base)
		rep.Segments, rep.ActiveSegment, rep.End = 1, base, base
		return seg, segmentHeaderSize, existed, l.removeCutMarker(hasCut)
	}

	// Step 4: open the sealed segments and check their headers.
	for i, base := range bases[:len(bases)-1] {
		seg, err := l.openSealed(base, nextBase(base, bases[i+1], quarantined))
		if err != nil {
			return nil, 0, false, err
		}
		l.segs = append(l.segs, seg)
	}
	l.holes = findHoles(l.fs, l.dir, quarantined, bases)
	l.holesChangedLocked()
	rep.Quarantined = append([]Hole(nil), l.holes...)
	sealed, ends := bases[:len(bases)-1], make([]uint64, len(bases)-1)
	for i, seg := range l.segs {
		ends[i] = seg.end
	}
	l.segMu.Lock()
	l.addHolesLocked(damagedHoles(names, l.dir, l.fs.PathJoin, sealed, ends))
	l.segMu.Unlock()

	// Steps 5 to 7: scan, cut and sync the active segment.
	base := bases[len(bases)-1]
	active, pos, end, err := l.recoverActive(base, limit)
	if err != nil {
		return nil, 0, false, err
	}
	l.segs = append(l.segs, active)

	// Step 8: publish the frontiers.
	l.head = l.segs[0].base
	l.written.v.Store(end)
	l.durable.v.Store(end)
	rep.Segments, rep.ActiveSegment, rep.End = len(l.segs), base, end
	rep.LostRecords = l.LostRecords()
	if rep.Stop != nil || rep.LatchedCut {
		l.opts.Logger.Warn("wal: recovery cut the log", "dir", l.dir, "end", end,
			"stop", rep.Stop, "cut_bytes", rep.CutBytes, "latched_cut", rep.LatchedCut)
	}
	return active, pos, existed, l.removeCutMarker(hasCut)
}

func (l *Log) openSealed(base, next uint64) (*segment, error) {
	path := l.fs.PathJoin(l.dir, segmentName(base))
	f, err := l.fs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("wal: open segment %d: %w", base, err)
	}
	seg := newSegment(base, path, f)
	seg.end = next
	h := make([]byte, segmentHeaderSize)
	if _, err := f.ReadAt(h, 0); err != nil && !errors.Is(err, io.EOF) {
		seg.release()
		return nil, fmt.Errorf("wal: read segment %d header: %w", base, err)
	}
	if err := checkSegmentHeader(h, base); err != nil {
		var ce *CorruptionError
		errors.As(err, &ce)
		seg.corrupt, seg.indexed = ce, true
		l.recovery.Corrupt = append(l.recovery.Corrupt, ce)
		l.opts.Logger.Error("wal: sealed segment header is corrupt", "dir", l.dir, "segment", base, "err", err)
	}
	return seg, nil
}

// recoverActive validates the active segment up to limit, cuts what follows
// the valid records, and syncs what it kept.
func (l *Log) recoverActive(base, limit uint64) (*segment, int64, uint64, error) {
	path := l.fs.PathJoin(l.dir, segmentName(base))
	f, err := l.fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("wal: open active segment %d: %w", base, err)
	}
	seg := newSegment(base, path, f)
	fail := func(err error) (*segment, int64, uint64, error) {
		seg.release()
		return nil, 0, 0, err
	}
	info, err := f.Stat()
	if err != nil {
		return fail(fmt.Errorf("wal: stat segment %d: %w", base, err))
	}
	size := info.Size()
	// Step 5a: the header. A missing or zero header means the segment was
	// created but never synced: give it a fresh one.
	h := make([]byte, segmentHeaderSize)
	n, err := f.ReadAt(h, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return fail(fmt.Errorf("wal: read segment %d header: %w", base, err))
	}
	if allZero(h[:n]) {
		if _, err := f.WriteAt(encodeSegmentHeader(base), 0); err != nil {
			return fail(fmt.Errorf("wal: rewrite segment %d header: %w", base, err))
		}
		l.recovery.RewroteHeader = true
		size = max(size, segmentHeaderSize)
	} else if err := checkSegmentHeader(h[:n], base); err != nil {
		return fail(err)
	}
	// Step 5b: scan the records.
	res, err := scanSegment(f, base, limit, scanActive, l.opts.MaxRecordSize, l.opts.IndexSpacing, l.opts.SegmentSize, l.opts.OnRecover)
	if err != nil {
		return fail(err)
	}
	seg.index, seg.indexed = res.index, true
	l.recovery.ScannedBytes = res.pos
	l.recovery.Stop = res.stop
	// Step 5c: keep the damaged ranges aside; their offsets become holes.
	l.recovery.Damaged = res.damage
	l.registerDamage(f, path, res.damage)
	// Step 6: cut everything after the valid records.
	cut, err := l.cutTail(f, res.pos, size)
	if err != nil {
		return fail(err)
	}
	l.recovery.CutBytes = cut
	// Step 7: sync what the page cache holds before publishing it as durable.
	if err := f.SyncData(); err != nil {
		return fail(fmt.Errorf("wal: sync recovered segment %d: %w", base, err))
	}
	if err := l.dirFile.Sync(); err != nil {
		return fail(fmt.Errorf("wal: sync directory: %w", err))
	}
	return seg, res.pos, res.end, nil
}

// createSegment creates and preallocates a segment file whose first record
// will carry offset base.
func (l *Log) createSegment(base uint64) (*segment, error) {
	path := l.fs.PathJoin(l.dir, segmentName(base))
	f, err := l.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, &StorageError{Op: fmt.Sprintf("create segment %d", base), Err: err}
	}
	if _, err := f.WriteAt(encodeSegmentHeader(base), 0); err != nil {
		_ = f.Close()
		if noSpace(err) {
			// roll refuses the append and stays healthy: an empty file
			// must not outlive the refusal. (Other failures latch, and
			// recovery gives the empty segment its header.)
			_ = l.fs.Remove(path)
		}
		return nil, &StorageError{Op: fmt.Sprintf("write segment %d header", base), Err: err}
	}
	if err := preallocate(f, l.opts.Preallocate, segmentHeaderSize, l.opts.preallocEnd(segmentHeaderSize, segmentHeaderSize)); err != nil {
		_ = f.Close()
		_ = l.fs.Remove(path) // never synced into the directory: nothing to keep
		return nil, &StorageError{Op: fmt.Sprintf("preallocate segment %d", base), Err: err}
	}
	seg := newSegment(base, path, f)
	seg.indexed = true
	return seg, nil
}

func (l *Log) syncNewSegment(seg *segment) error {
	if err := seg.file.SyncData(); err != nil {
		return fmt.Errorf("wal: sync segment %d: %w", seg.base, err)
	}
	if err := l.dirFile.Sync(); err != nil {
		return fmt.Errorf("wal: sync directory: %w", err)
	}
	return nil
}

// cutTail makes sure nothing follows the valid records at pos: it truncates
// the file there (and preallocates again) where the file supports it, and
// writes zeros over the rest otherwise. It returns the bytes cut.
func (l *Log) cutTail(f vfs.File, pos, size int64) (int64, error) {
	if size <= pos && l.opts.Preallocate != PreallocExtend {
		return 0, nil
	}
	if t, ok := f.(interface{ Truncate(int64) error }); ok {
		if err := t.Truncate(pos); err != nil {
			return 0, fmt.Errorf("wal: truncate segment at %d: %w", pos, err)
		}
		if err := preallocate(f, l.opts.Preallocate, pos, l.opts.preallocEnd(pos, pos)); err != nil {
			return 0, fmt.Errorf("wal: preallocate after cut: %w", err)
		}
		return max(size-pos, 0), nil
	}
	zeros := make([]byte, 64<<10)
	for at := pos; at < size; at += int64(len(zeros)) {
		n := min(int64(len(zeros)), size-at)
		if _, err := f.WriteAt(zeros[:n], at); err != nil {
			return 0, fmt.Errorf("wal: zero segment tail at %d: %w", at, err)
		}
	}
	return max(size-pos, 0), nil
}

func (l *Log) removeCutMarker(had bool) error {
	if !had {
		return nil
	}
	forgetCut(l.fs, l.dir) // carried out: the segments end at the cut now
	if err := l.fs.Remove(l.fs.PathJoin(l.dir, cutMarkerName)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("wal: remove cut marker: %w", err)
	}
	if err := l.dirFile.Sync(); err != nil {
		return fmt.Errorf("wal: sync directory: %w", err)
	}
	return nil
}
