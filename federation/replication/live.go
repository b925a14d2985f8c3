package replication

import (
	"context"
	"errors"
	"io"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fibril-edge/fibril/wal"
)

// A copy is live while its node holds every record the copy ever
// acknowledged, unsynced ones included. A buffered queue's recovery
// counts only live copies toward E-W+1 (a written set meets them in a
// copy that still holds its records), and waits for every copy when too
// few are live (control.Assignment.Installable).
//
// A copy becomes live when a stream brings it to the owner's written end
// at the stream's start (everything the owner had then, and so everything
// it had confirmed), and when this node is installed as its owner
// (MarkLive: the owner writes every record itself). It stops being live
// when its owner's log latches (watchLatch), when it is reopened after a
// latch or cut back, or an open finds it damaged (MarkCut, NoteOpened).
// A follower's copy that latched while following is thus still live when
// its seal begins: the seal reports the written end its streams had
// acknowledged (replica.acked), which the latch did not lower, so the
// copy counts only while another sealed copy holds what it lost.
//
// What a crash of the process leaves is still live: the records it had
// written are in the page cache or on disk. What a power loss, a reboot,
// or a file system shut down and mounted again leaves is not: the
// unsynced tail is gone. LiveFile tells the two apart across a restart.
// It holds a continuity token, the kernel's boot id and the id of the
// mount the copy's directory is on, written (synced) when the copy became
// live and removed when it stopped being so; an open under the same
// token finds the copy live again, one under another token does not.
// Where no token can be read (not Linux, or a file system other than the
// operating system's), a copy opened from disk is never live.
const LiveFile = "LIVE"

// liveness of a copy in this process.
type liveness int

const (
	liveUnknown liveness = iota // not looked at yet: LiveFile decides
	liveYes
	liveNo
)

// MarkLive records that this node holds every record of copy id.
func (f *Follower) MarkLive(id CopyID) {
	f.mu.Lock()
	was := f.live[id]
	f.live[id] = liveYes
	f.mu.Unlock()
	if was == liveYes {
		return
	}
	dir := f.copyDir(id)
	token := f.continuity(dir)
	if token == "" {
		return
	}
	if err := wal.WriteFileSynced(f.opts.FS, dir, LiveFile, []byte(token)); err != nil {
		f.opts.Logger.Warn("copy's liveness not recorded: a restart finds it not live", "copy", id.String(), "err", err)
	}
}

// MarkCut records that copy id may have lost records it acknowledged.
func (f *Follower) MarkCut(id CopyID) {
	f.mu.Lock()
	f.live[id] = liveNo
	f.mu.Unlock()
	f.forgetLive(id)
}

// NoteOpened takes what an open of copy id's log found: a latched cut
// carried out, or damage, means the copy lost records it acknowledged.
func (f *Follower) NoteOpened(id CopyID, rep wal.RecoveryReport) {
	if lostAtOpen(rep) {
		f.MarkCut(id)
	}
}

// lostAtOpen reports whether an open cut records away: a latched cut
// carried out, or damage.
func lostAtOpen(rep wal.RecoveryReport) bool { return rep.LatchedCut || len(rep.Damaged) > 0 }

// forgetLive removes id's LiveFile, synced. It takes no lock.
func (f *Follower) forgetLive(id CopyID) {
	dir := f.copyDir(id)
	err := f.opts.FS.Remove(f.opts.FS.PathJoin(dir, LiveFile))
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err == nil {
		var d vfs.File
		if d, err = f.opts.FS.OpenDir(dir); err == nil {
			err = d.Sync()
			_ = d.Close()
		}
	}
	if err != nil {
		f.opts.Logger.Error("copy's liveness record not removed", "copy", id.String(), "err", err)
	}
}

// isLive reports whether copy id is live, looking at its LiveFile the
// first time.
func (f *Follower) isLive(id CopyID) bool {
	f.mu.Lock()
	l := f.live[id]
	f.mu.Unlock()
	if l != liveUnknown {
		return l == liveYes
	}
	dir := f.copyDir(id)
	token := f.continuity(dir)
	b, err := readSmall(f.opts.FS, f.opts.FS.PathJoin(dir, LiveFile))
	live := err == nil && token != "" && string(b) == token
	if !live {
		f.forgetLive(id) // stale: it may never speak for the copy again
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.live[id] == liveUnknown { // nothing marked it meanwhile
		f.live[id] = liveNo
		if live {
			f.live[id] = liveYes
		}
	}
	return f.live[id] == liveYes
}

// liveAt makes copy id live once log, fed by a stream whose owner had
// written up to end when it started, holds everything before end.
func (f *Follower) liveAt(ctx context.Context, id CopyID, log *wal.Log, end uint64) {
	// The stream may end (ctx) as the copy gets there: look at the log
	// itself, which the stream holds open until this returns.
	_, _ = log.WaitWritten(ctx, end)
	if log.WrittenNext() < end {
		return
	}
	select {
	case <-log.Latched(): // it may have lost what it wrote
	default:
		f.MarkLive(id)
	}
}

// continuity is the token of dir's boot and mount, "" when unknown.
func (f *Follower) continuity(dir string) string {
	if f.opts.Continuity != nil {
		return f.opts.Continuity(dir)
	}
	return osContinuity(f.opts.FS, dir)
}

// readSmall reads a small file whole.
func readSmall(fs vfs.FS, path string) ([]byte, error) {
	file, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	return io.ReadAll(io.LimitReader(file, 4096))
}
