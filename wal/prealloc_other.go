//go:build !linux

package wal

import "github.com/cockroachdb/pebble/v2/vfs"

// preallocate reserves space where the file system offers it.
func preallocate(f vfs.File, p Prealloc, pos, size int64) error {
	if size <= pos || p == PreallocOff {
		return nil
	}
	return f.Preallocate(pos, size-pos)
}
