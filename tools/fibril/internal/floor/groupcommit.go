package floor

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// GroupCommitter is the plainest group commit there is. Appenders add their
// record to a shared pending buffer, then queue for one mutex. Whoever holds
// the mutex writes everything pending in a single write and fdatasyncs once;
// appenders whose records that covered find them durable when their turn
// comes and return without doing any I/O.
type GroupCommitter struct {
	f *os.File

	pendMu  sync.Mutex // guards pending and queued
	pending []byte
	queued  uint64 // records ever added to pending

	commitMu sync.Mutex // held by the appender doing the I/O
	spare    []byte     // the buffer not in use as pending; under commitMu
	err      error      // sticky I/O error; under commitMu

	durable atomic.Uint64 // records known to be on stable storage
	syncs   atomic.Uint64 // fdatasyncs done
}

// NewGroupCommitter returns a GroupCommitter appending to f, which should be
// open for writing and positioned at its end.
func NewGroupCommitter(f *os.File) *GroupCommitter {
	return &GroupCommitter{f: f}
}

// Append adds rec to the file and returns once it is durable.
func (g *GroupCommitter) Append(rec []byte) error {
	g.pendMu.Lock()
	g.pending = append(g.pending, rec...)
	g.queued++
	mine := g.queued
	g.pendMu.Unlock()

	g.commitMu.Lock()
	defer g.commitMu.Unlock()
	if g.err != nil {
		return g.err
	}
	if g.durable.Load() >= mine {
		return nil // a previous holder's write and sync covered it
	}

	g.pendMu.Lock()
	buf, upTo := g.pending, g.queued
	g.pending, g.spare = g.spare[:0], nil
	g.pendMu.Unlock()

	if _, err := g.f.Write(buf); err != nil {
		g.err = fmt.Errorf("group commit write: %w", err)
		return g.err
	}
	if err := fdatasync(g.f); err != nil {
		g.err = fmt.Errorf("group commit fdatasync: %w", err)
		return g.err
	}
	g.syncs.Add(1)
	g.durable.Store(upTo)
	g.spare = buf
	return nil
}

// Durable returns how many records are on stable storage.
func (g *GroupCommitter) Durable() uint64 { return g.durable.Load() }

// Syncs returns how many fdatasyncs have completed.
func (g *GroupCommitter) Syncs() uint64 { return g.syncs.Load() }

// GroupCommitResult is the outcome of RunGroupCommit.
type GroupCommitResult struct {
	Records int
	Syncs   uint64
	Elapsed time.Duration
}

// RunGroupCommit has writers goroutines append records records of size
// bytes, between them, through a GroupCommitter on a new file in dir, and
// reports how long that took and how many fdatasyncs it needed.
func RunGroupCommit(ctx context.Context, dir string, writers, records, size int) (res GroupCommitResult, err error) {
	if writers < 1 || records < 1 {
		return res, fmt.Errorf("group commit: need at least one writer and one record (got %d, %d)", writers, records)
	}
	f, err := os.CreateTemp(dir, "floor-group-commit-*")
	if err != nil {
		return res, fmt.Errorf("create group commit file: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close group commit file: %w", cerr)
		}
		if rerr := os.Remove(f.Name()); rerr != nil && err == nil {
			err = fmt.Errorf("remove group commit file: %w", rerr)
		}
	}()

	g := NewGroupCommitter(f)
	rec := record(size)
	var next atomic.Int64 // records claimed so far
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	start := time.Now()
	for range writers {
		wg.Go(func() {
			for next.Add(1) <= int64(records) {
				if err := ctx.Err(); err != nil {
					errs <- err
					return
				}
				if err := g.Append(rec); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return res, err
	}
	return GroupCommitResult{Records: records, Syncs: g.Syncs(), Elapsed: elapsed}, nil
}
