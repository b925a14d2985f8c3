package benchutil

import (
	"fmt"

	"golang.org/x/sys/unix"
)

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// fsMagic maps statfs(2) f_type values to names. ext2, ext3 and ext4 share
// one magic number; it is reported as ext4, by far the most common today.
var fsMagic = map[uint32]string{
	unix.EXT4_SUPER_MAGIC:      "ext4",
	unix.XFS_SUPER_MAGIC:       "xfs",
	unix.TMPFS_MAGIC:           "tmpfs",
	unix.BTRFS_SUPER_MAGIC:     "btrfs",
	unix.F2FS_SUPER_MAGIC:      "f2fs",
	unix.OVERLAYFS_SUPER_MAGIC: "overlayfs",
	unix.NFS_SUPER_MAGIC:       "nfs",
	unix.RAMFS_MAGIC:           "ramfs",
	unix.FUSE_SUPER_MAGIC:      "fuse",
	unix.V9FS_MAGIC:            "9p",
	unix.MSDOS_SUPER_MAGIC:     "vfat",
	unix.EXFAT_SUPER_MAGIC:     "exfat",
	0x2fc12fc1:                 "zfs",
	0x6e736673:                 "ntfs3",
}

func fsType(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "unknown"
	}
	// f_type is int32 on some architectures, so large magics such as
	// btrfs's come out negative there; the low 32 bits are what count.
	magic := uint32(st.Type)
	if name, ok := fsMagic[magic]; ok {
		return name
	}
	return fmt.Sprintf("0x%x", magic)
}
