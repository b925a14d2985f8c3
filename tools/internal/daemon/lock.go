package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// lockFileName is the data directory's lock: held (flock) by the running
// fibrild, and holding its pid.
const lockFileName = "fibrild.pid"

// ErrAlreadyRunning: another fibrild holds the data directory.
var ErrAlreadyRunning = errors.New("already running")

// LockDataDir takes the data directory's lock before anything else is
// opened or bound, and writes this process's pid into it; release lets
// go. A second fibrild on the same directory fails here, naming the pid
// that holds it, rather than deep in the metadata store. The lock goes
// with the process, whatever the way it ends.
func LockDataDir(dir string) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("data directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock the data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			held, _ := os.ReadFile(path)
			if pid, perr := strconv.Atoi(string(bytes.TrimSpace(held))); perr == nil {
				return nil, fmt.Errorf("%w: pid %d holds %s", ErrAlreadyRunning, pid, path)
			}
			return nil, fmt.Errorf("%w: another process holds %s", ErrAlreadyRunning, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("write the pid into %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
