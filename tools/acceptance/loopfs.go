package acceptance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// LoopOptions configure NewLoopFS.
type LoopOptions struct {
	// FS is the file system type: "xfs" or "ext4". Required.
	FS string
	// Size of the image file in bytes. Default 320 MiB (mkfs.xfs refuses
	// data devices under 300 MB).
	Size int64
	// Dir holds the image file and the mount point. Required; a temp dir
	// outside the tree under test (t.TempDir()).
	Dir string
	// MkfsArgs are extra arguments for mkfs.
	MkfsArgs []string
}

// ErrNoLoop is returned by NewLoopFS when loop mounts are not possible
// here (not root, tools missing, the kernel refuses): the error names why.
var ErrNoLoop = errors.New("acceptance: loop mounts unavailable")

// LoopFS is a file system on a loop-mounted image file: a disk whose power
// the test can cut.
type LoopFS struct {
	// Image is the image file, Mnt the mount point.
	Image, Mnt string
	fs         string

	mu      sync.Mutex
	mounted bool
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// NewLoopFS creates a sparse image file of o.Size, makes a file system on
// it and mounts it with -o loop. Errors wrap ErrNoLoop when the machine
// cannot do it.
func NewLoopFS(ctx context.Context, o LoopOptions) (*LoopFS, error) {
	if o.Size == 0 {
		o.Size = 320 << 20
	}
	var mkfs []string
	switch o.FS {
	case "xfs":
		mkfs = append([]string{"mkfs.xfs", "-q", "-f"}, o.MkfsArgs...)
	case "ext4":
		mkfs = append([]string{"mkfs.ext4", "-q", "-F"}, o.MkfsArgs...)
	default:
		return nil, fmt.Errorf("acceptance: loop fs type %q (want xfs or ext4)", o.FS)
	}
	if o.Dir == "" {
		return nil, errors.New("acceptance: LoopOptions.Dir is required")
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: mount -o loop needs root (euid %d)", ErrNoLoop, os.Geteuid())
	}
	for _, tool := range []string{mkfs[0], "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%w: %s not found (install xfsprogs and e2fsprogs): %v", ErrNoLoop, tool, err)
		}
	}
	l := &LoopFS{Image: filepath.Join(o.Dir, o.FS+".img"), Mnt: filepath.Join(o.Dir, o.FS+".mnt"), fs: o.FS}
	if err := os.MkdirAll(l.Mnt, 0o755); err != nil {
		return nil, fmt.Errorf("acceptance: loop mount point: %w", err)
	}
	f, err := os.Create(l.Image)
	if err != nil {
		return nil, fmt.Errorf("acceptance: loop image: %w", err)
	}
	err = f.Truncate(o.Size)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("acceptance: loop image size: %w", err)
	}
	if err := run(ctx, mkfs[0], append(mkfs[1:], l.Image)...); err != nil {
		return nil, fmt.Errorf("acceptance: %w", err)
	}
	if err := l.Mount(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// FSType is "xfs" or "ext4".
func (l *LoopFS) FSType() string { return l.fs }

// Mount mounts the image at Mnt.
func (l *LoopFS) Mount(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mounted {
		return nil
	}
	if err := run(ctx, "mount", "-t", l.fs, "-o", "loop", l.Image, l.Mnt); err != nil {
		return fmt.Errorf("%w: %w", ErrNoLoop, err)
	}
	l.mounted = true
	return nil
}

// Unmount unmounts it (after a PowerCut too: the kernel has already
// dropped what was not synced and writes nothing more).
func (l *LoopFS) Unmount(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.mounted {
		return nil
	}
	if err := run(ctx, "umount", l.Mnt); err != nil {
		return fmt.Errorf("acceptance: %w", err)
	}
	l.mounted = false
	return nil
}

// fsIOCShutdown is FS_IOC_SHUTDOWN, _IOR('X', 125, __u32), which XFS
// (XFS_IOC_GOINGDOWN) and ext4 (EXT4_IOC_SHUTDOWN) both implement;
// shutdownNoLogFlush is their GOING_FLAGS_NOLOGFLUSH.
const (
	fsIOCShutdown      = 0x8004587d
	shutdownNoLogFlush = 0x2
)

// PowerCut shuts the file system down the way a power cut would: the
// FS_IOC_SHUTDOWN ioctl without flushing the log, as `xfs_io -x -c
// shutdown` does, issued from this process so that it starts within
// microseconds of the call. Everything not yet synced is dropped, and
// every later access on the mount fails with EIO until it is unmounted
// and mounted again. Processes with files open there keep running and get
// EIO.
func (l *LoopFS) PowerCut(ctx context.Context) error {
	f, err := os.Open(l.Mnt)
	if err != nil {
		return fmt.Errorf("acceptance: power cut: %w", err)
	}
	defer f.Close()
	if err := unix.IoctlSetPointerInt(int(f.Fd()), fsIOCShutdown, shutdownNoLogFlush); err != nil {
		return fmt.Errorf("acceptance: power cut: FS_IOC_SHUTDOWN on %s: %w", l.Mnt, err)
	}
	return nil
}

// Close unmounts the file system (if mounted) and removes the image.
func (l *LoopFS) Close() error {
	err := l.Unmount(context.Background())
	return errors.Join(err, os.Remove(l.Image))
}
