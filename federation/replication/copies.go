package replication

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/fibril-edge/fibril/wal"
)

// The copies a Follower keeps, on disk:
//
//	Dir/<queue>/<incarnation>/<partition>/   one wal.Log per copy
//
// A queue deleted and declared again under the same name has a new
// incarnation, so its copies start empty in a directory of their own.
// At most one copy of a partition is open at a time: a stream for a newer
// incarnation (which Accept let through) removes the older copy first.
//
// A copy goes away (stream ended, log closed, directory removed) when
// Collect finds that Keep rejects it, or on Remove. While it is being
// removed a stream for the same partition waits, and then opens a fresh
// copy only if Keep still accepts it: Collect and the opening of a copy
// both decide under Follower.mu, so a copy Keep has rejected is never
// opened again behind Collect's back.

// ErrStaleIncarnation refuses a stream for an older incarnation of a
// queue than the copy this node holds.
var ErrStaleIncarnation = errors.New("replication: stale queue incarnation")

// ErrNotKept refuses a stream for a copy this node no longer keeps.
var ErrNotKept = errors.New("replication: this node no longer keeps the copy")

// CopyID names one copy: a partition of one incarnation of a queue.
type CopyID struct {
	Queue       string
	Incarnation uint64
	Partition   int
}

func (id CopyID) String() string {
	return fmt.Sprintf("%s/%d (incarnation %d)", id.Queue, id.Partition, id.Incarnation)
}

type replica struct {
	id  CopyID
	log *wal.Log
	// acked is the highest written end this copy's streams have reported
	// to an owner since it was opened: what the owner's gate may have
	// counted. A latch drops the log's written end back to its last sync,
	// so a seal takes what the copy acknowledged from here (seal.go).
	acked atomic.Uint64
	// stream is the connection feeding the copy, and done closes when its
	// handler has returned; removing is set (and closes once the copy is
	// gone) while the copy is being removed. All guarded by Follower.mu.
	stream   net.Conn
	done     chan struct{}
	removing chan struct{}
}

// ack records that a stream reports the copy written up to written; it
// is called before the report goes out.
func (r *replica) ack(written uint64) {
	for {
		cur := r.acked.Load()
		if written <= cur || r.acked.CompareAndSwap(cur, written) {
			return
		}
	}
}

func replicaKey(queue string, partition int) string {
	return queue + "/" + strconv.Itoa(partition)
}

func (f *Follower) copyDir(id CopyID) string {
	return f.opts.FS.PathJoin(f.opts.Dir, id.Queue, strconv.FormatUint(id.Incarnation, 10), strconv.Itoa(id.Partition))
}

// Log returns the open copy of a partition, if this node has one.
func (f *Follower) Log(queue string, partition int) (*wal.Log, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.replicas[replicaKey(queue, partition)]
	if !ok || r.removing != nil {
		return nil, false
	}
	return r.log, true
}

// attach opens (or finds) the copy named by h and makes c its stream,
// ending the previous stream first.
func (f *Follower) attach(h Hello, c net.Conn) (*replica, chan struct{}, error) {
	id := CopyID{Queue: h.Queue, Incarnation: h.Incarnation, Partition: int(h.Partition)}
	key := replicaKey(id.Queue, id.Partition)
	f.mu.Lock()
	for {
		if f.closed {
			f.mu.Unlock()
			return nil, nil, errors.New("follower closed")
		}
		r, ok := f.replicas[key]
		switch {
		case ok && r.removing != nil:
			wait := r.removing
			f.mu.Unlock()
			<-wait
			f.mu.Lock()
			continue
		case ok && r.id.Incarnation > id.Incarnation:
			f.mu.Unlock()
			return nil, nil, fmt.Errorf("%w: this node holds %s", ErrStaleIncarnation, r.id)
		case ok && r.id.Incarnation < id.Incarnation:
			// The queue was deleted and declared again: the old copy goes.
			f.mu.Unlock()
			if err := f.remove(r); err != nil {
				return nil, nil, err
			}
			f.mu.Lock()
			continue
		case !ok:
			if f.opts.Keep != nil && !f.opts.Keep(id) {
				f.mu.Unlock()
				return nil, nil, fmt.Errorf("%w: %s", ErrNotKept, id)
			}
			if c == nil { // a seal opens only a copy there is
				if _, err := f.opts.FS.Stat(f.copyDir(id)); err != nil {
					f.mu.Unlock()
					return nil, nil, fmt.Errorf("open replica %s: %w", id, err)
				}
			}
			log, err := f.openLog(id, f.interval)
			if err != nil {
				f.mu.Unlock()
				return nil, nil, fmt.Errorf("open replica %s: %w", id, err)
			}
			f.opened[id] = true
			if lostAtOpen(log.Recovery()) {
				f.live[id] = liveNo
				f.forgetLive(id)
			}
			r = &replica{id: id, log: log}
			f.replicas[key] = r
		}
		if r.done != nil { // a stream, or a seal, holds the copy
			old, done := r.stream, r.done
			f.mu.Unlock()
			if old != nil {
				old.Close()
			}
			<-done
			f.mu.Lock()
			continue // look again: the copy may be going
		}
		done := make(chan struct{})
		r.stream, r.done = c, done
		f.mu.Unlock()
		return r, done, nil
	}
}

// openLog opens a copy's log. A copy created here, empty, is marked as
// catching up first (seal.go): it is no witness until it holds what the
// owner had when it first followed.
func (f *Follower) openLog(id CopyID, interval time.Duration) (*wal.Log, error) {
	dir := f.copyDir(id)
	if _, err := f.opts.FS.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := MarkCatchUp(f.opts.FS, dir, catchUpUnknown); err != nil {
			return nil, fmt.Errorf("mark new replica %s: %w", id, err)
		}
	}
	// No tail cache: nothing reads a copy while it follows (a recovery
	// reads it once), and a node may follow many partitions. The node's
	// broker, whose metadata store locks the data directory, keeps other
	// processes out.
	log, err := wal.Open(dir, wal.Options{FS: f.opts.FS, SegmentSize: f.opts.SegmentSize,
		TailCacheBytes: -1, BackgroundSyncInterval: interval, LockInProcess: true, SyncGroup: f.opts.SyncGroup,
		Logger: f.opts.Logger.With("replica", replicaKey(id.Queue, id.Partition))})
	if err != nil {
		return nil, err
	}
	return log, nil
}

// waitHeldLocked ends the stream or seal holding r and waits for it to
// let go. f.mu is held, and released while waiting.
func (f *Follower) waitHeldLocked(r *replica) {
	for r.done != nil {
		old, done := r.stream, r.done
		f.mu.Unlock()
		if old != nil {
			old.Close()
		}
		<-done
		f.mu.Lock()
	}
}

func (f *Follower) detach(r *replica, done chan struct{}) {
	f.mu.Lock()
	if r.done == done {
		r.stream, r.done = nil, nil
	}
	f.mu.Unlock()
	close(done)
}

// remove ends r's stream, closes its log and removes its directory. A
// removal already under way is waited for.
func (f *Follower) remove(r *replica) error {
	f.mu.Lock()
	if r.removing != nil {
		wait := r.removing
		f.mu.Unlock()
		<-wait
		return nil
	}
	if f.closed {
		f.mu.Unlock()
		return errors.New("follower closed")
	}
	f.wg.Add(1)
	defer f.wg.Done()
	r.removing = make(chan struct{})
	f.waitHeldLocked(r)
	f.mu.Unlock()
	cerr := r.log.Close()
	rerr := f.removeDir(r.id)
	f.mu.Lock()
	if key := replicaKey(r.id.Queue, r.id.Partition); f.replicas[key] == r {
		delete(f.replicas, key)
	}
	delete(f.live, r.id)
	close(r.removing)
	f.mu.Unlock()
	if rerr != nil {
		return rerr
	}
	if cerr != nil {
		f.opts.Logger.Warn("removed replica's log did not close cleanly", "replica", r.id.String(), "err", cerr)
	}
	f.opts.Logger.Info("replica removed", "queue", r.id.Queue, "partition", r.id.Partition, "incarnation", r.id.Incarnation)
	return nil
}

// removeDir removes a copy's directory, then its incarnation's and its
// queue's when they are left empty.
func (f *Follower) removeDir(id CopyID) error {
	fs := f.opts.FS
	if err := fs.RemoveAll(f.copyDir(id)); err != nil {
		return fmt.Errorf("remove replica %s: %w", id, err)
	}
	for _, dir := range []string{
		fs.PathJoin(f.opts.Dir, id.Queue, strconv.FormatUint(id.Incarnation, 10)),
		fs.PathJoin(f.opts.Dir, id.Queue),
	} {
		if names, err := fs.List(dir); err != nil || len(names) > 0 {
			break
		}
		if err := fs.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove empty replica directory %s: %w", dir, err)
		}
	}
	return nil
}

// NewestIncarnation is the newest incarnation of queue with a copy of
// partition on disk, 0 for none. It reads only the queue's directory.
func (f *Follower) NewestIncarnation(queue string, partition int) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var newest uint64
	for _, id := range f.copiesOfLocked([]string{queue}) {
		if id.Partition == partition {
			newest = max(newest, id.Incarnation)
		}
	}
	return newest
}

// TakeOpened returns the copies opened (created or reopened) since the
// last call: a Collect may find one of them that the last did not.
func (f *Follower) TakeOpened() []CopyID {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := slices.Collect(maps.Keys(f.opened))
	clear(f.opened)
	return ids
}

// Copies lists the copies on disk, open or not, in order.
func (f *Follower) Copies() ([]CopyID, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.onDiskLocked()
}

// onDiskLocked walks Dir for copy directories; names that do not parse
// as an incarnation or a partition are not copies and are left alone.
func (f *Follower) onDiskLocked() ([]CopyID, error) {
	fs := f.opts.FS
	queues, err := fs.List(f.opts.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list replicas in %s: %w", f.opts.Dir, err)
	}
	return f.copiesOfLocked(queues), nil
}

// copiesOfLocked lists the copies on disk of the named queues, in order.
func (f *Follower) copiesOfLocked(queues []string) []CopyID {
	fs := f.opts.FS
	var ids []CopyID
	for _, q := range slices.Sorted(slices.Values(queues)) {
		incs, err := fs.List(fs.PathJoin(f.opts.Dir, q))
		if err != nil {
			continue // a file, not a queue's directory
		}
		for _, is := range slices.Sorted(slices.Values(incs)) {
			inc, err := strconv.ParseUint(is, 10, 64)
			if err != nil {
				continue
			}
			parts, err := fs.List(fs.PathJoin(f.opts.Dir, q, is))
			if err != nil {
				continue
			}
			for _, ps := range parts {
				p, err := strconv.Atoi(ps)
				if err != nil || p < 0 {
					continue
				}
				ids = append(ids, CopyID{Queue: q, Incarnation: inc, Partition: p})
			}
		}
	}
	slices.SortFunc(ids, func(a, b CopyID) int {
		return cmp.Or(cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Incarnation, b.Incarnation), cmp.Compare(a.Partition, b.Partition))
	})
	return ids
}

// Collect removes every copy, open or only on disk, that Keep rejects
// and that is not InUse, and returns those it removed. Without Keep it
// removes nothing.
func (f *Follower) Collect() ([]CopyID, error) {
	if f.opts.Keep == nil {
		return nil, nil
	}
	return f.removeMatching(f.onDiskLocked, f.collectable)
}

// collectable says whether Collect removes copy id.
func (f *Follower) collectable(id CopyID) bool {
	return !f.opts.Keep(id) && (f.opts.InUse == nil || !f.opts.InUse(id))
}

// CollectAmong removes those of ids, and any copy of the queues named,
// open or only on disk, that Collect would, and returns those it removed.
// It looks only at their directories, not at every copy's: a caller that
// knows which copies may have been left behind saves the walk.
func (f *Follower) CollectAmong(ids []CopyID, queues []string) ([]CopyID, error) {
	if f.opts.Keep == nil {
		return nil, nil
	}
	present := func() ([]CopyID, error) {
		on := f.copiesOfLocked(queues)
		for _, id := range ids {
			if slices.Contains(queues, id.Queue) {
				continue // listed with its queue
			}
			if _, err := f.opts.FS.Stat(f.copyDir(id)); err == nil {
				on = append(on, id)
			}
		}
		return on, nil
	}
	return f.removeMatching(present, f.collectable)
}

// Remove removes every copy of a queue's partition, whatever its
// incarnation: the stream feeding it ends, its log closes and its
// directory goes.
func (f *Follower) Remove(queue string, partition int) error {
	_, err := f.removeMatching(f.onDiskLocked, func(id CopyID) bool { return id.Queue == queue && id.Partition == partition })
	return err
}

// removeMatching removes the copies on disk (as listed, under the lock)
// that match selects: those only on disk under the lock (so no stream
// opens one meanwhile), the open ones through remove.
func (f *Follower) removeMatching(listLocked func() ([]CopyID, error), match func(CopyID) bool) ([]CopyID, error) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, errors.New("follower closed")
	}
	onDisk, err := listLocked()
	if err != nil {
		f.mu.Unlock()
		return nil, err
	}
	var removed []CopyID
	var open []*replica
	var errs []error
	for _, id := range onDisk {
		if !match(id) {
			continue
		}
		if r, ok := f.replicas[replicaKey(id.Queue, id.Partition)]; ok && r.id == id {
			open = append(open, r)
			continue
		}
		if err := f.removeDir(id); err != nil {
			errs = append(errs, err)
			continue
		}
		f.opts.Logger.Info("replica removed from disk", "queue", id.Queue, "partition", id.Partition, "incarnation", id.Incarnation)
		removed = append(removed, id)
	}
	f.mu.Unlock()
	for _, r := range open {
		if err := f.remove(r); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, r.id)
	}
	return removed, errors.Join(errs...)
}
