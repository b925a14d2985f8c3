package benchutil

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// EvictPageCache asks the kernel to drop the cached pages of every regular
// file under dir (posix_fadvise DONTNEED). Only clean pages are dropped, so
// the files should have been synced first. It is best effort: the kernel
// may keep pages that are mapped or in use elsewhere.
func EvictPageCache(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("evict page cache: %w", err)
		}
		defer f.Close()
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			return fmt.Errorf("evict page cache of %s: %w", path, err)
		}
		return nil
	})
}
