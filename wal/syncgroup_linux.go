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

// ext4Magic is ext4's f_type in statfs(2).
const ext4Magic = 0xEF53

func openFSHandle(dir string) (fsHandle, error) {
	if release, ok := syncfsReportsErrors(); !ok {
		return fsHandle{}, fmt.Errorf("%w: kernel %s", ErrSyncGroupUnsupported, release)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fsHandle{}, fmt.Errorf("wal: open %s for its file system's syncs: %w", dir, err)
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		_ = unix.Close(fd)
		return fsHandle{}, fmt.Errorf("wal: statfs %s: %w", dir, err)
	}
	// Only ext4's sync is known to report what fdatasync would: overlayfs
	// keeps writeback errors on the file system under it, XFS's sync may
	// skip the device's cache flush when its log is idle, FUSE may not
	// reach the backing store.
	if fs.Type != ext4Magic {
		_ = unix.Close(fd)
		return fsHandle{}, fmt.Errorf("%w: %s is not on ext4 (file system type %#x)", ErrSyncGroupUnsupported, dir, fs.Type)
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
		return errGroupClosed
	}
	if err := unix.Syncfs(h.fd); err != nil {
		return err
	}
	// A file system remounted read-only after an error (errors=remount-ro)
	// returns from syncfs at once, having written nothing back.
	var fs unix.Statfs_t
	if err := unix.Fstatfs(h.fd, &fs); err != nil {
		return fmt.Errorf("statfs after sync: %w", err)
	}
	if fs.Flags&unix.ST_RDONLY != 0 {
		return fmt.Errorf("file system of %s is read-only", h.path)
	}
	return nil
}

func (h *fsHandle) close() error {
	if h.fd < 0 {
		return nil
	}
	err := unix.Close(h.fd)
	h.fd = -1
	return err
}

// syncfsReportsErrors reports whether this kernel's syncfs returns every
// error fdatasync would, and the kernel's release. Writeback errors reach
// syncfs from Linux 5.8, the file system's own sync errors (a failed
// journal commit or cache flush) from 5.17, and ext4 reports a forced
// shutdown to syncfs from 6.6: 6.6 is the first release the group trusts.
func syncfsReportsErrors() (release string, ok bool) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown", false
	}
	release = unix.ByteSliceToString(u.Release[:])
	major, minor, ok := kernelVersion(release)
	return release, ok && (major > 6 || major == 6 && minor >= 6)
}
