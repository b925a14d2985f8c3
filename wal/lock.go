package wal

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Locking a log's directory (Options.LockInProcess). By default Open
// locks a LOCK file in the directory and holds it open while the log is,
// which keeps every other process and every other Open of this one out.
// A broker opens a log per partition, and one descriptor per idle queue
// for a lock its own data directory lock already gives was a third of
// what an idle queue held open; with LockInProcess, the log is registered
// in processLocks instead, which keeps out the other Opens of this
// process (two owners of one log in one process are a bug a lock should
// catch) and holds nothing open. The two kinds do not see each other:
// every Open of one directory must use the same.

// errHeldInProcess is the cause of ErrLocked when another Open of this
// process holds the log.
var errHeldInProcess = errors.New("held by another open log of this process")

// processLocks are the directories held by logs opened with
// LockInProcess.
var processLocks = struct {
	sync.Mutex
	held map[processLockKey]*processLock
}{held: map[processLockKey]*processLock{}}

type processLockKey struct {
	fs  vfs.FS
	dir string
}

type processLock struct{ key processLockKey }

// dirKey names dir on fs for this process; fs must be comparable.
func dirKey(fs vfs.FS, dir string) processLockKey {
	key := processLockKey{fs: fs, dir: filepath.Clean(dir)}
	if abs, err := filepath.Abs(dir); err == nil && fs == vfs.Default {
		key.dir = abs
	}
	return key
}

// lockDir locks dir for a log: in this process only when inProcess and
// the file system can be told apart from others, else with a LOCK file.
func lockDir(fs vfs.FS, dir string, inProcess bool) (io.Closer, error) {
	if !inProcess || !reflect.TypeOf(fs).Comparable() {
		return fs.Lock(fs.PathJoin(dir, lockName))
	}
	key := dirKey(fs, dir)
	processLocks.Lock()
	defer processLocks.Unlock()
	if _, ok := processLocks.held[key]; ok {
		return nil, fmt.Errorf("%s: %w", dir, errHeldInProcess)
	}
	l := &processLock{key: key}
	processLocks.held[key] = l
	return l, nil
}

// Close lets the directory go, unless another Open holds it now.
func (l *processLock) Close() error {
	processLocks.Lock()
	defer processLocks.Unlock()
	if processLocks.held[l.key] == l {
		delete(processLocks.held, l.key)
	}
	return nil
}
