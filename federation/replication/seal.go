package replication

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fibril-edge/fibril/wal"
)

// Recovery on a copy (docs/decisions.md, "Failover and written-set
// recovery"): Seal fences the epochs below a new one and reports what the
// copy holds; a copy created empty is no witness until it has caught up
// (CatchUpFile); Release hands a copy over to the node's broker when the
// node becomes the partition's owner, the directory staying where it is.

// CatchUpFile, in a copy's directory, marks a copy that may lack records
// it once acknowledged: created empty (a new follower, a wiped data
// directory), it holds a u64, the owner's written end when the copy first
// followed (math.MaxUint64 until it did), and goes once the copy is
// durable that far. While it is there the copy is no witness in a
// recovery: its seal does not count toward E-W+1.
const CatchUpFile = "CATCHUP"

const catchUpUnknown = math.MaxUint64

// SealResult is a copy's report at a seal.
type SealResult struct {
	End       uint64 // durable end after the seal's sync
	LastEpoch uint64 // the epoch of the record before End
	Witness   bool   // holds every record it ever acknowledged durable
	// Cut: the copy may have lost records it acknowledged as written but
	// had not synced, and nobody knows how many: it was not live (see
	// MarkLive) when the seal began.
	Cut bool
	// Acked, when not Cut, is the written end the copy had acknowledged
	// before the seal: End, or more when the seal had to reopen it after
	// a storage failure, which cut it back to its last sync.
	Acked  uint64
	NoCopy bool // this node holds no copy of the partition
}

// MarkCatchUp writes dir's catch-up marker (to: the owner's end it must
// reach), synced, creating dir first.
func MarkCatchUp(fs vfs.FS, dir string, to uint64) error {
	if err := wal.MkdirAllSynced(fs, dir); err != nil {
		return err
	}
	return wal.WriteFileSynced(fs, dir, CatchUpFile, binary.LittleEndian.AppendUint64(nil, to))
}

// catchUpTarget reads dir's marker: ok false when the copy is a witness.
func catchUpTarget(fs vfs.FS, dir string) (to uint64, ok bool, err error) {
	f, err := fs.Open(fs.PathJoin(dir, CatchUpFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("open catch-up marker in %s: %w", dir, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil || len(b) != 8 {
		// Unreadable: the copy stays no witness.
		return catchUpUnknown, true, nil
	}
	return binary.LittleEndian.Uint64(b), true, nil
}

// caughtUp removes dir's marker once durable reaches its target.
func caughtUp(fs vfs.FS, dir string, durable uint64) (bool, error) {
	to, ok, err := catchUpTarget(fs, dir)
	if err != nil || !ok {
		return !ok, err
	}
	if durable < to {
		return false, nil
	}
	if err := fs.Remove(fs.PathJoin(dir, CatchUpFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("remove catch-up marker in %s: %w", dir, err)
	}
	d, err := fs.OpenDir(dir)
	if err != nil {
		return false, err
	}
	defer d.Close()
	return true, d.Sync()
}

// Seal seals this node's copy of id at epoch: the stream feeding it ends,
// the copy refuses every stream of a lower epoch from now on (the epoch
// is persisted in the log), everything it has written is synced, and its
// durable end and the epoch of its last record are reported. A copy
// sealed at epoch already (the node restarted during the recovery) is
// synced and reported again. A latched copy is reopened first, which cuts
// it back to its last sync: only durable records are evidence.
func (f *Follower) Seal(ctx context.Context, id CopyID, epoch uint64) (SealResult, error) {
	// Close waits for a seal under way, as for a stream.
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return SealResult{}, fmt.Errorf("seal %s: follower closed", id)
	}
	f.wg.Add(1)
	f.mu.Unlock()
	defer f.wg.Done()
	dir := f.copyDir(id)
	if _, err := f.opts.FS.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return SealResult{NoCopy: true}, nil
	}
	r, done, err := f.attach(Hello{Queue: id.Queue, Incarnation: id.Incarnation, Partition: uint32(id.Partition)}, nil)
	if err != nil {
		return SealResult{}, fmt.Errorf("seal %s: %w", id, err)
	}
	defer f.detach(r, done)
	// What the copy acknowledged written is what its streams reported:
	// a log that latched before the seal (a failed background sync or
	// write) has dropped its written end back to its last sync already,
	// and would report no loss at all.
	live, acked := f.isLive(id), max(r.log.WrittenNext(), r.acked.Load())
	seal := func() error {
		if err := r.log.Seal(ctx, epoch); err != nil && !errors.Is(err, wal.ErrEpochNotAdvanced) {
			return err
		}
		return r.log.Sync(ctx)
	}
	if err := seal(); err != nil {
		f.opts.Logger.Warn("copy cannot seal; reopening it, which cuts it back to its last sync", "copy", id.String(), "err", err)
		if err := f.reopen(r, nil); err != nil {
			return SealResult{}, fmt.Errorf("seal %s: reopen: %w", id, err)
		}
		if err := seal(); err != nil {
			return SealResult{}, fmt.Errorf("seal %s: %w", id, err)
		}
	}
	h, err := LoadHistory(f.opts.FS, dir)
	if err != nil {
		return SealResult{}, fmt.Errorf("seal %s: %w", id, err)
	}
	end := r.log.DurableNext()
	witness, err := caughtUp(f.opts.FS, dir, end)
	if err != nil {
		return SealResult{}, fmt.Errorf("seal %s: %w", id, err)
	}
	if h == nil {
		// No instance ever wrote here, or its records are of no known
		// one (a crash between creating the copy and marking it).
		witness = false
	}
	res := SealResult{End: end, LastEpoch: h.LastEpoch(end), Witness: witness, Cut: !live}
	if live {
		res.Acked = max(acked, end)
	}
	return res, nil
}

// reopen closes r's log and opens it again (its stream is r's caller's),
// after cut when one is given.
func (f *Follower) reopen(r *replica, cut func() error) error {
	// The copy is cut until a stream makes it live again; what it
	// acknowledged before no longer speaks for it.
	f.MarkCut(r.id)
	r.acked.Store(0)
	_ = r.log.Close()
	if cut != nil {
		if err := cut(); err != nil {
			return err
		}
	}
	f.mu.Lock()
	interval := f.interval
	f.mu.Unlock()
	log, err := f.openLog(r.id, interval)
	if err != nil {
		return err
	}
	f.mu.Lock()
	r.log = log
	f.opened[r.id] = true
	f.mu.Unlock()
	return nil
}

// cutBack drops the copy's records from offset at on, crash safe
// (wal.CutBack): they are past where it diverges from the owner's log.
func (f *Follower) cutBack(r *replica, at uint64) error {
	return f.reopen(r, func() error { return wal.CutBack(f.opts.FS, f.copyDir(r.id), at) })
}

// CopyHistory is the history of this node's copy id.
func (f *Follower) CopyHistory(id CopyID) (History, error) {
	return LoadHistory(f.opts.FS, f.copyDir(id))
}

// Release closes this node's copy of a partition and forgets it, leaving
// its directory: the node's broker opens it as the owner's log. A stream
// feeding it ends.
func (f *Follower) Release(queue string, partition int) error {
	key := replicaKey(queue, partition)
	f.mu.Lock()
	r, ok := f.replicas[key]
	if !ok || f.closed {
		f.mu.Unlock()
		return nil
	}
	r.removing = make(chan struct{})
	f.waitHeldLocked(r)
	delete(f.replicas, key)
	close(r.removing)
	f.mu.Unlock()
	return r.log.Close()
}
