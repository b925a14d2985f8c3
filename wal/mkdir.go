package wal

import (
	"errors"
	"fmt"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// MkdirAllSynced creates dir and its missing parents and syncs the parent
// of each directory it created, so that a power loss cannot take the new
// directory, and the synced records in it, away.
func MkdirAllSynced(fs vfs.FS, dir string) error {
	var parents []string
	for d := dir; fs.PathDir(d) != d; d = fs.PathDir(d) {
		if _, err := fs.Stat(d); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("wal: stat %s: %w", d, err)
		}
		parents = append(parents, fs.PathDir(d))
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("wal: create %s: %w", dir, err)
	}
	for _, p := range parents {
		if err := SyncDir(fs, p); err != nil {
			return err
		}
	}
	return nil
}

// SyncDir syncs directory dir, making the entries created, renamed or
// removed in it durable.
func SyncDir(fs vfs.FS, dir string) error {
	f, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("wal: open directory %s: %w", dir, err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("wal: sync directory %s: %w", dir, err)
	}
	return nil
}
