package wal

import (
	"errors"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// preallocate reserves the segment's space from pos to size as p says.
// Files without a descriptor (the in-memory FS) and file systems without
// fallocate get nothing reserved, which is correct, only slower.
func preallocate(f vfs.File, p Prealloc, pos, size int64) error {
	if size <= pos || p == PreallocOff {
		return nil
	}
	fd := f.Fd()
	if fd == vfs.InvalidFd {
		return nil
	}
	mode := uint32(0)
	if p == PreallocKeepSize {
		mode = unix.FALLOC_FL_KEEP_SIZE
	}
	err := unix.Fallocate(int(fd), mode, pos, size-pos)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return nil
	}
	return err
}
