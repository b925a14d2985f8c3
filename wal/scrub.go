package wal

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// Scrub. Open scans only the active segment, so that start-up is bounded
// by one segment whatever the size of the log. The sealed segments are
// checked by a scrub: one goroutine owned by the log reads each of them
// once after Open, oldest first, at Options.ScrubBytesPerSecond, verifying
// every record. Damage it finds is kept aside and becomes holes exactly as
// a read that met it would (damage.go). A background pass was chosen over
// a bounded-rate scan inside Open because a rate bound inside Open still
// makes start-up grow with the log, which the partition's start-up cannot
// afford; until the scrub reaches a segment, a read that meets damage in it
// does the same work.

// ScrubReport is what one scrub pass over the sealed segments found.
type ScrubReport struct {
	Segments int           // sealed segments scanned
	Bytes    int64         // bytes read
	Damaged  []Damage      // damaged ranges found, in offset order
	Duration time.Duration // from start to end of the pass
	// Err is why the pass stopped early (the log closed, or a read failed);
	// nil when it scanned every sealed segment.
	Err error
}

// errScrubStopped ends a pass when the log closes.
var errScrubStopped = errors.New("wal: scrub stopped: log closing")

// runScrub is the scrub goroutine: one pass over the sealed segments open
// at its start, at rate bytes per second.
func (l *Log) runScrub(rate int64) {
	defer close(l.scrubDone)
	start := time.Now()
	l.segMu.RLock()
	segs := append([]*segment(nil), l.segs[:len(l.segs)-1]...)
	for _, s := range segs {
		s.acquire()
	}
	l.segMu.RUnlock()
	rep := ScrubReport{}
	pace := &pacedReader{rate: rate, start: start, closing: l.closing}
	for i, seg := range segs {
		if rep.Err == nil {
			pace.r = seg.file
			damage, err := l.checkSealed(seg, pace, resyncChunk)
			rep.Damaged = append(rep.Damaged, damage...)
			if err != nil {
				rep.Err = err
			} else {
				rep.Segments = i + 1
			}
		}
		seg.release()
	}
	rep.Bytes, rep.Duration = pace.read, time.Since(start)
	if rep.Err != nil && !errors.Is(rep.Err, errScrubStopped) {
		l.opts.Logger.Error("wal: scrub of sealed segments failed", "dir", l.dir, "err", rep.Err)
	}
	if l.opts.OnScrub != nil {
		l.opts.OnScrub(rep)
	}
}

// checkSealed scans the sealed segment seg in full through r, verifying
// every record. Damage it finds is kept aside and becomes holes, and the
// scan's index replaces seg's: it has an entry at the first record after
// each damaged range, so no read of a later record scans the damage. A
// segment whose header is corrupt, or that retention removed, is skipped.
func (l *Log) checkSealed(seg *segment, r io.ReaderAt, chunk int64) ([]Damage, error) {
	seg.mu.Lock()
	end, skip := seg.end, seg.corrupt != nil
	seg.mu.Unlock()
	if skip || seg.removed.Load() {
		return nil, nil
	}
	res, err := scanSegment(r, seg.base, end, scanSealed, l.opts.MaxRecordSize, l.opts.IndexSpacing, chunk, nil)
	if err != nil {
		return nil, fmt.Errorf("wal: check sealed segment %d: %w", seg.base, err)
	}
	seg.mu.Lock()
	if !seg.indexed || len(res.damage) > 0 {
		seg.index, seg.indexed = res.index, true
	}
	seg.mu.Unlock()
	if seg.removed.Load() {
		return nil, nil
	}
	l.registerDamage(seg.file, seg.path, res.damage)
	return res.damage, nil
}

// damageFound looks at a read error: a corruption in a sealed segment
// whose index was complete (the damage came after it was indexed) has the
// segment checked in full. It reports whether that found damage, so the
// read can be tried again and meet a hole instead.
func (l *Log) damageFound(err error) bool {
	var ce *CorruptionError
	if !errors.As(err, &ce) {
		return false
	}
	l.segMu.RLock()
	var seg *segment
	for _, s := range l.segs[:len(l.segs)-1] {
		if s.base == ce.Segment {
			seg = s
			seg.acquire()
		}
	}
	l.segMu.RUnlock()
	if seg == nil {
		return false
	}
	defer seg.release()
	damage, err := l.checkSealed(seg, seg.file, scanChunk)
	if err != nil {
		l.opts.Logger.Error("wal: check of a damaged sealed segment failed", "dir", l.dir, "segment", seg.base, "err", err)
		return false
	}
	return len(damage) > 0
}

// pacedReader reads through r at no more than rate bytes per second on
// average since start, and gives up when closing is closed.
type pacedReader struct {
	r       io.ReaderAt
	rate    int64
	start   time.Time
	read    int64
	closing <-chan struct{}
}

func (p *pacedReader) ReadAt(b []byte, off int64) (int, error) {
	select {
	case <-p.closing:
		return 0, errScrubStopped
	default:
	}
	n, err := p.r.ReadAt(b, off)
	p.read += int64(n)
	due := p.start.Add(time.Duration(float64(p.read) / float64(p.rate) * float64(time.Second)))
	if wait := time.Until(due); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-p.closing:
			return n, errScrubStopped
		}
	}
	return n, err
}
