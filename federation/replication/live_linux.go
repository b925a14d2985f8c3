package replication

import (
	"os"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// osContinuity is the kernel's boot id and the unique id of the mount dir
// is on (statx STATX_MNT_ID_UNIQUE, Linux 6.8 on: never reused, unlike
// STATX_MNT_ID, so a file system mounted again gets a new one), when fs is
// the operating system's. An older kernel gives "": no copy opened from
// disk is live there.
func osContinuity(fs vfs.FS, dir string) string {
	if fs != vfs.Default {
		return ""
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, dir, 0, unix.STATX_MNT_ID_UNIQUE, &st); err != nil || st.Mask&unix.STATX_MNT_ID_UNIQUE == 0 {
		return ""
	}
	return strings.TrimSpace(string(boot)) + "/" + strconv.FormatUint(st.Mnt_id, 10)
}
