package acceptance

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The power cut the cases rely on, checked on this kernel: after
// PowerCut, synced data survives a remount, unsynced data does not, and
// the mount answers EIO until then.
func TestLoopFSPowerCut(t *testing.T) {
	requireAcceptanceGate(t)
	for _, fsType := range []string{"xfs", "ext4"} {
		t.Run(fsType, func(t *testing.T) {
			ctx := caseCtx(t, time.Minute)
			l, err := NewLoopFS(ctx, LoopOptions{FS: fsType, Dir: t.TempDir()})
			if err != nil {
				t.Fatalf("THIS CASE NEEDS A LOOP-MOUNTED %s FILE SYSTEM AND CANNOT HAVE ONE: %v", fsType, err)
			}
			defer l.Close()
			synced, unsynced := filepath.Join(l.Mnt, "synced"), filepath.Join(l.Mnt, "unsynced")
			f, err := os.Create(synced)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString("kept")
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			f.Close()
			d, err := os.Open(l.Mnt)
			if err != nil {
				t.Fatal(err)
			}
			d.Sync()
			d.Close()
			if err := os.WriteFile(unsynced, []byte("dropped"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := l.PowerCut(ctx); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(l.Mnt, "after"), []byte("x"), 0o644); !errors.Is(err, syscall.EIO) {
				t.Fatalf("write after the cut: %v, want EIO", err)
			}
			if err := l.Unmount(ctx); err != nil {
				t.Fatal(err)
			}
			if err := l.Mount(ctx); err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(synced); err != nil || string(b) != "kept" {
				t.Fatalf("synced file after the cut: %q, %v", b, err)
			}
			if b, err := os.ReadFile(unsynced); err == nil && len(b) > 0 {
				t.Fatalf("unsynced file survived the cut with %q", b)
			}
		})
	}
}
