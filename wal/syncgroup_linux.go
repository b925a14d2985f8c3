package wal

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// fsHandle is the descriptor a SyncGroup syncs its file system through.
type fsHandle struct {
	path string
	fd   int // -1 once closed
	dev  uint64
}

func openFSHandle(dir string) (fsHandle, error) {
	if !syncfsReportsErrors() {
		return fsHandle{}, ErrSyncGroupUnsupported
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fsHandle{}, fmt.Errorf("wal: open %s for its file system's syncs: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return fsHandle{}, fmt.Errorf("wal: stat %s: %w", dir, err)
	}
	return fsHandle{path: dir, fd: fd, dev: uint64(st.Dev)}, nil //nolint:unconvert // Dev's width differs by arch
}

// holds reports whether f is a file on the handle's file system: files
// without a descriptor (the in-memory FS) are not.
func (h *fsHandle) holds(f vfs.File) bool {
	fd := f.Fd()
	if fd == vfs.InvalidFd {
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(fd), &st); err != nil {
		return false
	}
	return uint64(st.Dev) == h.dev //nolint:unconvert // Dev's width differs by arch
}

func (h *fsHandle) closed() bool { return h.fd < 0 }

func (h *fsHandle) sync() error {
	if h.fd < 0 {
		return fmt.Errorf("wal: sync group on %s is closed", h.path)
	}
	return unix.Syncfs(h.fd)
}

func (h *fsHandle) close() error {
	if h.fd < 0 {
		return nil
	}
	err := unix.Close(h.fd)
	h.fd = -1
	return err
}

// syncfsReportsErrors reports whether this kernel's syncfs returns
// writeback errors: Linux 5.8 and later.
func syncfsReportsErrors() bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false
	}
	major, minor, ok := kernelVersion(unix.ByteSliceToString(u.Release[:]))
	return ok && (major > 5 || major == 5 && minor >= 8)
}
