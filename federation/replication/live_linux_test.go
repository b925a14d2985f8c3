package replication

import (
	"os"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The continuity token names the boot and the mount; it is the same for
// two directories of one file system and stable while the system runs.
func TestOSContinuity(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	ta := osContinuity(vfs.Default, a)
	if ta == "" {
		t.Skip("this kernel has no unique mount ids (STATX_MNT_ID_UNIQUE, Linux 6.8)")
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ta, strings.TrimSpace(string(boot))+"/") {
		t.Fatalf("token %q does not start with the boot id", ta)
	}
	if tb := osContinuity(vfs.Default, b); tb != ta {
		t.Fatalf("two directories of one file system: %q and %q", ta, tb)
	}
	if got := osContinuity(vfs.NewMem(), a); got != "" {
		t.Fatalf("an in-memory file system has token %q", got)
	}
}
