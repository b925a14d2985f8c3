package wal

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A node with many quiet logs pays one fdatasync per background sync of
// each: a thousand buffered queues at ten records a second each sync
// nearly every record on its own. A SyncGroup lets the background syncs of
// every log on one file system share one sync of the whole file system
// (syncfs(2)): the first log to ask leads, waits until Spacing has passed
// since the last sync started, gathering others, and syncs once for all
// who asked before it started; those who ask meanwhile form the next
// group. The spacing bounds the file system's syncs, and with them the
// journal commits and device cache flushes they force: each commits every
// inode changed since the last, a write's new mtime too, which a log's own
// fdatasync leaves to the journal's timer. Syncs an append waits for (a
// durable queue's) go through a second lane, with no spacing: the logs
// that ask while one runs share the next. In either lane a log that asks
// alone syncs its own file, as without a group. Rollover, seal and Close
// sync their own file. An append, a rollover or a Close that finds the
// log's background sync waiting out the spacing hurries it: the log
// leaves the wait and syncs its own file, or, leading, stops waiting.
//
// Errors. syncfs reports a writeback error of any file on the file system
// once per open descriptor, and cannot say whose (NewSyncGroup refuses the
// kernels and file systems where it may not report one at all: see
// syncfsReportsErrors and openFSHandle). The group syncs through one
// descriptor it holds for its life, so every error after it opened reaches
// it exactly once. When one does, every member of that group, and every
// log at its next grouped sync, also fdatasyncs its own file, which reports
// the error to the log it belongs to and to no other: a log latches for
// its own lost writes, not a neighbour's, and none counts a lost write as
// synced. Each log also checks its own file at its first grouped sync, for
// errors from before the group opened.

// ErrSyncGroupUnsupported says this platform's file-system sync is not
// known to report every error fdatasync would, so a SyncGroup could hide
// one: the group needs Linux 6.6 or later and ext4.
var ErrSyncGroupUnsupported = errors.New("wal: no sync group here (it needs Linux 6.6 or later and ext4)")

// errGroupClosed fails the syncs of a closed group: its members check
// their own files instead.
var errGroupClosed = errors.New("wal: sync group closed")

// DefaultSyncGroupSpacing is the least time between two file-system syncs'
// starts: half the logs' default background sync interval.
const DefaultSyncGroupSpacing = DefaultBackgroundSyncInterval / 2

// SyncGroupOptions configure a SyncGroup.
type SyncGroupOptions struct {
	// Spacing is the least time between the starts of two file-system
	// syncs: the first log to ask waits out what is left of it, gathering
	// others (a background sync is off every publish's path; an append that
	// waits for one hurries it), and at most half the leader's background
	// sync interval, so a log's written records wait at most 1.5 times
	// its interval for their sync. Default 50 ms (DefaultSyncGroupSpacing);
	// negative: no wait, groups form only from the logs that ask during a
	// sync.
	Spacing time.Duration

	// syncFS syncs the file system; tests replace it to count or fail.
	syncFS func() error
	// onWait, if set, sees the number of logs waiting each time one more
	// starts to wait (tests), with the group's lock held.
	onWait func(waiting int)
	// beforeLead, if set, runs before a leader starts a sync, without the
	// lock (tests: it holds the leader until the group they want waits).
	beforeLead func()
}

// SyncGroupStats counts a group's work.
type SyncGroupStats struct {
	FSSyncs  uint64 // file-system syncs run
	Failures uint64 // of which reported an error
	Covered  uint64 // log syncs completed by a successful file-system sync
	Verified uint64 // per-file syncs run to check for a reported error (and at each log's first grouped sync)
	Hurried  uint64 // log syncs that left the group to sync their own file for an append waiting on them
	Alone    uint64 // log syncs that found no other log asking, and synced their own file
	Waiting  int    // logs waiting for a sync now
}

// SyncGroup shares one file system's sync among the background syncs of
// many logs. Its methods are safe for concurrent use; a nil *SyncGroup is
// valid and syncs every file on its own.
type SyncGroup struct {
	opts SyncGroupOptions
	dir  fsHandle // the descriptor syncs go through; its device names the file system
	// waited is the lane of the syncs appends wait for (a durable
	// queue's): no spacing, so a sync starts as soon as the one before it
	// ends, and the appends of other logs that ask meanwhile share the
	// next. It has its own descriptor, so it sees every error too.
	waited *SyncGroup

	mu      sync.Mutex
	cond    sync.Cond
	running bool          // a leader is gathering or syncing
	last    time.Time     // when the last file-system sync started
	started uint64        // file-system syncs started
	queued  int           // logs that asked since the last sync started
	done    uint64        // file-system syncs finished
	errGen  uint64        // file-system syncs that reported an error
	failed  uint64        // the last finished sync's number, if it failed
	cut     chan struct{} // ends the gathering leader's wait; sent and drained under mu
	// The gathering leader, while it waits out the spacing: its member
	// and the spacing it waits for.
	gathering     bool
	gatherer      *member
	gatherSpacing time.Duration
	roundInterval time.Duration // the shortest interval of the logs that asked since the last start
	st            SyncGroupStats
}

// NewSyncGroup opens a group for the file system holding dir. It returns
// ErrSyncGroupUnsupported where that file system's sync cannot report
// errors; callers go on without a group.
func NewSyncGroup(dir string, opts SyncGroupOptions) (*SyncGroup, error) {
	g, err := newSyncLane(dir, opts)
	if err != nil {
		return nil, err
	}
	if g.waited, err = newSyncLane(dir, SyncGroupOptions{Spacing: -1}); err != nil {
		_ = g.dir.close()
		return nil, err
	}
	return g, nil
}

func newSyncLane(dir string, opts SyncGroupOptions) (*SyncGroup, error) {
	h, err := openFSHandle(dir)
	if err != nil {
		return nil, err
	}
	if opts.Spacing == 0 {
		opts.Spacing = DefaultSyncGroupSpacing
	}
	// errGen starts at one: every log checks its own file at its first
	// grouped sync, for errors before the group opened (which the group's
	// descriptor does not see). Open the group before its logs all the same.
	g := &SyncGroup{opts: opts, dir: h, errGen: 1, cut: make(chan struct{}, 1)}
	g.cond.L = &g.mu
	if g.opts.syncFS == nil {
		g.opts.syncFS = g.dir.sync
	}
	return g, nil
}

// Close releases the group's descriptors. Logs still using the group after
// it closed sync their files on their own.
func (g *SyncGroup) Close() error {
	if g == nil {
		return nil
	}
	return errors.Join(g.waited.closeLane(), g.closeLane())
}

func (g *SyncGroup) closeLane() error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.running {
		g.cond.Wait()
	}
	return g.dir.close()
}

// WaitedStats returns the counters of the lane of syncs appends wait for.
func (g *SyncGroup) WaitedStats() SyncGroupStats {
	if g == nil {
		return SyncGroupStats{}
	}
	return g.waited.Stats()
}

// Stats returns the counters of the group's background syncs.
func (g *SyncGroup) Stats() SyncGroupStats {
	if g == nil {
		return SyncGroupStats{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.st
}

// member is one log's standing in a group: the file-system errors it has
// checked its own file against and its standing in the waited lane (both
// owned by the log's syncer goroutine), and the sync its writer hurried
// (hurry; 0: none).
type member struct {
	seenErrGen uint64
	waited     *member
	hurried    atomic.Uint64
	// file is the segment file the member last synced, and onFS whether
	// it is on the group's file system: looked up once per file, not
	// with an fstat per sync.
	file vfs.File
	onFS bool
}

// syncWaited makes what was written to f durable for an append that waits
// for it: through the waited lane, where a log that finds no other asking
// syncs its own file, as it would without a group.
func (g *SyncGroup) syncWaited(m *member, f vfs.File, observe func(time.Duration, error)) error {
	if g == nil {
		return syncFile(f, observe)
	}
	if m.waited == nil {
		m.waited = &member{}
	}
	return g.waited.sync(m.waited, f, observe, 0, 0)
}

// sync makes what was written to f before the call durable: through the
// group's next file-system sync when f is on the group's file system and
// another log asks too, with f's own fdatasync otherwise. observe times the
// fdatasyncs it runs. interval is the log's background sync interval:
// a sync it leads waits at most half of it (and at most Spacing).
func (g *SyncGroup) sync(m *member, f vfs.File, observe func(time.Duration, error), interval time.Duration, seq uint64) error {
	if g == nil {
		return syncFile(f, observe)
	}
	if f != m.file {
		m.file, m.onFS = f, g.dir.holds(f)
	}
	if !m.onFS {
		return syncFile(f, observe)
	}
	g.mu.Lock()
	if g.dir.closed() {
		g.mu.Unlock()
		return syncFile(f, observe)
	}
	ticket := g.started + 1 // the first sync to start after this call
	g.queued++
	if interval > 0 && (g.roundInterval == 0 || interval < g.roundInterval) {
		g.roundInterval = interval
		if g.gathering && spacingFor(g.opts.Spacing, interval) < g.gatherSpacing {
			g.cutLocked() // this log's records may not wait as long: sync now
		}
	}
	g.st.Waiting++
	if g.opts.onWait != nil {
		g.opts.onWait(g.st.Waiting)
	}
	for g.done < ticket {
		if seq != 0 && m.hurried.Load() == seq && g.started < ticket {
			// An append waits for this log's sync, and the group's has
			// not started: the log syncs its own file, now.
			g.queued--
			g.st.Waiting--
			g.st.Hurried++
			g.mu.Unlock()
			return syncFile(f, observe)
		}
		if g.running {
			g.cond.Wait()
			continue
		}
		if alone, err := g.lead(m, f, observe); alone {
			g.st.Waiting--
			g.st.Alone++
			g.mu.Unlock()
			return err
		}
	}
	g.st.Waiting--
	// The sync numbered ticket covered f; a failure of it, or of any
	// sync since this log last checked, raised errGen.
	verify := m.seenErrGen < g.errGen
	errGen := g.errGen
	if g.failed != ticket {
		g.st.Covered++
	}
	if verify {
		g.st.Verified++
	}
	g.mu.Unlock()
	if !verify {
		return nil
	}
	// A writeback error somewhere on the file system since this log last
	// checked (or the log's first grouped sync): its own fdatasync says
	// whether the error was its.
	if err := syncFile(f, observe); err != nil {
		return err
	}
	m.seenErrGen = errGen
	return nil
}

// hurry says an append waits for m's sync in flight, the sync numbered
// seq: m leaves the group if the group's sync has not started, or, if m
// leads a gathering, the gathering ends.
func (g *SyncGroup) hurry(m *member, seq uint64) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	m.hurried.Store(seq)
	g.cond.Broadcast()
	if g.gathering && g.gatherer == m {
		g.cutLocked()
	}
}

// cutLocked ends the gathering leader's wait; g.mu is held.
func (g *SyncGroup) cutLocked() {
	select {
	case g.cut <- struct{}{}:
	default: // a cut is pending already
	}
}

// spacingFor is the spacing a log with this background sync interval may
// wait: at most half the interval, so its records wait at most 1.5 times
// it for their sync.
func spacingFor(spacing, interval time.Duration) time.Duration {
	if interval > 0 && interval/2 < spacing {
		return interval / 2
	}
	return spacing
}

// lead runs one file-system sync for everyone waiting; g.mu is held, and
// released while it gathers and syncs. When no other log asked, it syncs
// the leader's own file f instead and reports alone, with that sync's
// error: one fdatasync, which skips the inodes' timestamps a file system's
// sync commits, and whose error is the leader's own.
func (g *SyncGroup) lead(m *member, f vfs.File, observe func(time.Duration, error)) (alone bool, err error) {
	g.running = true
	if g.opts.beforeLead != nil {
		g.mu.Unlock()
		g.opts.beforeLead()
		g.mu.Lock()
	}
	spacing := spacingFor(g.opts.Spacing, g.roundInterval)
	if wait := time.Until(g.last.Add(spacing)); wait > 0 {
		select {
		case <-g.cut: // stale: sent for a gathering that had ended
		default:
		}
		g.gathering, g.gatherer, g.gatherSpacing = true, m, spacing
		g.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-g.cut: // the leader's append waits, or a log whose records may not wait as long asked
			t.Stop()
		}
		g.mu.Lock()
		g.gathering, g.gatherer = false, nil
	}
	g.roundInterval = 0
	g.last = time.Now()
	g.started++
	n := g.started
	round := g.queued
	g.queued = 0
	g.mu.Unlock()
	defer g.cond.Broadcast() // after the sync, with g.mu held again
	if round == 1 {          // the leader alone asked before this sync started
		err := syncFile(f, observe)
		g.mu.Lock()
		g.done, g.running = n, false
		return true, err
	}
	err = g.opts.syncFS()
	g.mu.Lock()
	g.done, g.running = n, false
	if err != errGroupClosed {
		g.st.FSSyncs++
	}
	if err != nil {
		if err != errGroupClosed {
			g.st.Failures++
		}
		g.errGen++
		g.failed = n
	}
	return false, nil
}

// syncFile is f's own fdatasync, timed for observe.
func syncFile(f vfs.File, observe func(time.Duration, error)) error {
	start := time.Now()
	err := f.SyncData()
	if observe != nil {
		observe(time.Since(start), err)
	}
	return err
}

// String names the group for logs.
func (g *SyncGroup) String() string {
	if g == nil {
		return "no sync group"
	}
	return fmt.Sprintf("sync group on %s", g.dir.path)
}

// kernelVersion reads "6.1.0-13-arm64" as 6, 1 and "5.8-rc1" as 5, 8.
func kernelVersion(release string) (major, minor int, ok bool) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	digits := strings.IndexFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' })
	if digits < 0 {
		digits = len(parts[1])
	}
	minor, err2 := strconv.Atoi(parts[1][:digits])
	return major, minor, err1 == nil && err2 == nil
}
