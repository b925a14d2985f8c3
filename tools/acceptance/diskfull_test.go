package acceptance

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/internal/await"
)

// Case 6, disk full: the data directory on a 64 MiB loop-mounted ext4,
// with the free-space watermark off, under load until a filler file has
// taken every free block. Publishes must be refused with an explicit
// storage-full error (wire code disk_full), never confirmed without being
// stored; no file may be truncated to zero and no queue dropped; and
// publishing must resume, without a restart, once the filler is deleted.
// A restart afterwards and a full drain check that every confirm is
// stored.

func TestDiskFull(t *testing.T) {
	requireAcceptanceGate(t)
	for _, tc := range []struct {
		name, minFree string
		reason        string // in at least one refusal
	}{
		// The file system itself fills: the rollover finds no room, or a
		// checkpoint spent the data directory's reserve first.
		{"enospc", "0", "no space to grow the log|reserve"},
		// The free-space watermark (16 MiB here; 64 MiB by default)
		// refuses first, and the file system may fill too; or a checkpoint
		// spent the reserve first (with it, the free space is above the
		// watermark).
		{"watermark", "16MiB", "watermark|reserve"},
	} {
		t.Run(tc.name, func(t *testing.T) { diskFullCase(t, tc.minFree, tc.reason) })
	}
}

// smallDiskBroker starts fibrild on a fresh 64 MiB loop-mounted ext4
// (segments of 1 MiB, checkpoints 100 ms after a change, the free-space
// watermark at minFree) with a history beside it, all gone with the test.
func smallDiskBroker(t *testing.T, ctx context.Context, minFree string) (*LoopFS, *Broker, *History) {
	t.Helper()
	requireAcceptanceGate(t)
	lfs, err := NewLoopFS(ctx, LoopOptions{FS: "ext4", Size: 64 << 20, Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("the disk-full cases need a loop-mounted ext4 (run as root with e2fsprogs and xfsprogs): %v", err)
	}
	t.Cleanup(func() { lfs.Close() })
	dir := t.TempDir()
	bin := filepath.Join(dir, "fibrild")
	if err := BuildFibrild(ctx, "../fibrild", bin); err != nil {
		t.Fatal(err)
	}
	b := &Broker{Bin: bin, DataDir: filepath.Join(lfs.Mnt, "data"), Args: []string{"--storage.segment_size", "1MiB",
		"--log.level", "info", "--storage.min_free", minFree, "--storage.checkpoint_delay", "100ms"}}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Kill) // before the loop file system's Close
	h, err := CreateHistory(filepath.Join(dir, "history.jsonl"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return lfs, b, h
}

func diskFullCase(t *testing.T, minFree, reason string) {
	ctx := caseCtx(t, 2*time.Minute)
	lfs, b, h := smallDiskBroker(t, ctx, minFree)
	data := b.DataDir
	queues := []QueueSpec{{Name: "durable", Partitions: 2}, {Name: "buffered", Buffered: true, Partitions: 2}}
	seed := caseSeed(t)
	h.Note("case 6 disk full: seed %d, ext4 64 MiB, segment 1 MiB, min_free %s", seed, minFree)
	r, err := StartLoad(ctx, LoadOptions{Addr: b.Addr(), Admin: b.Admin, History: h, Queues: queues,
		Consumers: -1, Rate: 400, BodySize: 1000, Seed: seed, Prefix: "full"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	if err := r.WaitConfirmed(ctx, 400); err != nil {
		t.Fatal(err)
	}

	filler := filepath.Join(lfs.Mnt, "filler")
	before, err := segmentPaths(data)
	if err != nil {
		t.Fatal(err)
	}
	filled, err := fillDisk(filler)
	if err != nil {
		t.Fatal(err)
	}
	h.Note("filler of %d bytes", filled)
	h.Fault("disk full")
	t.Logf("filler took %d bytes", filled)
	await.Until(t, ctx, "publishes refused on the full disk", func() bool { return r.Counts().Failed >= 20 })
	// Every segment that held records still does. (A rollover refused for
	// want of space may show its new file empty for an instant before it
	// removes it: the check after the restart covers every file.)
	for path := range before {
		if info, err := os.Stat(path); err != nil || info.Size() == 0 {
			t.Fatalf("segment %s on the full disk: %v, %v", path, info, err)
		}
	}
	// The daemon must live through the full disk (checkpoints every 100 ms
	// meet it too).
	if status, body, err := readyz(ctx, b.Admin()); err != nil {
		t.Fatalf("fibrild on a full disk: /readyz: %v\n%s", err, lastLines(b.Proc().Log(), 80))
	} else if status != http.StatusOK {
		t.Logf("/readyz on a full disk: %d %s", status, body)
	}

	if refused := refusalCount(ctx, b.Admin(), "disk_full"); refused == 0 {
		t.Fatalf("fibril_publish_refusals_total{reason=\"disk_full\"} is 0 after %d refusals", r.Counts().Failed)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	h.Note("filler removed")
	freedAt := r.Counts()
	if err := r.WaitConfirmed(ctx, freedAt.Confirmed+400); err != nil {
		t.Fatalf("publishing did not resume after space returned: %v", err)
	}
	r.Stop()
	counts := r.Counts()

	if err := b.Stop(30 * time.Second); err != nil {
		t.Fatalf("shutdown after the disk filled: %v\n%s", err, lastLines(b.Proc().Log(), 10))
	}
	if err := noEmptyFiles(data); err != nil {
		t.Fatal(err)
	}
	h.Restart()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if status, body, err := readyz(ctx, b.Admin()); err != nil || status != http.StatusOK {
		t.Fatalf("/readyz after the restart: %d %s %v", status, body, err)
	}
	if _, err := Drain(ctx, h, b.Addr(), b.Admin(), queues); err != nil {
		t.Fatal(err)
	}
	if err := h.Sync(); err != nil {
		t.Fatal(err)
	}
	events, err := ReadHistory(h.Path())
	if err != nil {
		t.Fatal(err)
	}
	refusals, withReason, other, first := 0, "", map[string]int{}, ""
	withReasonRE := regexp.MustCompile(reason)
	for _, e := range events {
		if e.Kind != KindFail {
			continue
		}
		if strings.Contains(e.Err, "disk_full") && strings.Contains(e.Err, "storage full") {
			refusals++
			if first == "" {
				first = e.Err
			}
			if withReason == "" && withReasonRE.MatchString(e.Err) {
				withReason = e.Err
			}
		} else {
			other[e.Err]++
		}
	}
	if len(other) > 0 {
		t.Fatalf("publishes failed with other errors than storage full: %v", other)
	}
	if withReason == "" {
		t.Fatalf("no refusal of %d says %q; the first says %q", refusals, reason, first)
	}
	t.Logf("refused with: %s", withReason)
	rep := Verify(events, queues)
	t.Logf("%d confirmed, %d refused as storage full\n%s", counts.Confirmed, refusals, rep)
	if f := rep.Failures(); len(f) > 0 {
		t.Fatalf("failures: %v", f)
	}
	if len(rep.Lost) > 0 {
		t.Fatalf("%d confirmed messages lost without any power cut", len(rep.Lost))
	}
}

// fillDisk writes path until the file system has no block left, syncs it
// and returns its size.
func fillDisk(path string) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int64
	for _, chunk := range []int{1 << 20, 64 << 10, 4 << 10, 512} {
		buf := make([]byte, chunk)
		for {
			k, err := f.Write(buf)
			n += int64(k)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				return n, err
			}
		}
	}
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.ENOSPC) {
		return n, err
	}
	return n, nil
}

// segmentPaths lists the segment files under dir.
func segmentPaths(dir string) (map[string]bool, error) {
	out := map[string]bool{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".seg") {
			out[path] = true
		}
		return err
	})
	return out, err
}

// noEmptyFiles reports the segment files under dir that are empty (a
// truncation to zero, or a new segment left without its header).
func noEmptyFiles(dir string) error {
	var empty []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Size() == 0 && strings.HasSuffix(path, ".seg") {
			empty = append(empty, path)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(empty) > 0 {
		return errors.New("segment files truncated to zero: " + strings.Join(empty, ", "))
	}
	return nil
}

// refusalCount sums fibril_publish_refusals_total for reason over every
// queue from /metrics (0 when it cannot be read).
func refusalCount(ctx context.Context, admin, reason string) float64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, admin+"/metrics", nil)
	if err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0
	}
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "fibril_publish_refusals_total{") && strings.Contains(line, `reason="`+reason+`"`) {
			if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
				sum += v
			}
		}
	}
	return sum
}

// Case 6b, space freed by acks: the data directory on a 64 MiB
// loop-mounted ext4 with the free-space watermark off, filled by one
// durable queue's publishes until the file system itself refuses them.
// Then every message is consumed and acked, with nothing else freeing a
// byte (no filler to delete, no restart): the acks, the checkpoints that
// follow them and retention must free the queue's segments, so that
// publishing resumes; nothing confirmed is lost.
func TestDiskFullFreedByAcks(t *testing.T) {
	ctx := caseCtx(t, 2*time.Minute)
	lfs, b, h := smallDiskBroker(t, ctx, "0")
	seed := caseSeed(t)
	queues := []QueueSpec{{Name: "filled"}}
	h.Note("case 6b: ext4 64 MiB, segment 1 MiB, min_free 0, 16 KiB bodies")
	r, err := StartLoad(ctx, LoadOptions{Addr: b.Addr(), History: h, Queues: queues, Consumers: -1,
		BodySize: 16 << 10, Seed: seed, Prefix: "fill"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	await.Until(t, ctx, "publishes refused on the full disk", func() bool { return r.Counts().Failed >= 20 })
	full := r.Counts()
	free := func() uint64 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(lfs.Mnt, &st); err != nil {
			t.Fatal(err)
		}
		return st.Bavail * uint64(st.Bsize)
	}
	freeFull := free()
	t.Logf("full after %d confirms: %d bytes free", full.Confirmed, freeFull)

	// Consume and ack everything, while the publishers go on trying.
	drained, err := Drain(ctx, h, b.Addr(), b.Admin(), queues)
	if err != nil {
		t.Fatalf("drain on the full disk: %v\n%s", err, lastLines(b.Proc().Log(), 40))
	}
	if err := r.WaitConfirmed(ctx, r.Counts().Confirmed+200); err != nil {
		t.Fatalf("publishing did not resume once everything was acked (%d drained; %d bytes free): %v\n%s",
			drained, free(), err, lastLines(b.Proc().Log(), 40))
	}
	t.Logf("acked %d; %d bytes free when full, %d once publishing resumed", drained, freeFull, free())
	r.Stop()
	if _, err := Drain(ctx, h, b.Addr(), b.Admin(), queues); err != nil {
		t.Fatal(err)
	}
	if rep := judge(t, h, queues, seed, nil); len(rep.Lost) > 0 {
		t.Fatalf("%d confirmed messages lost without any power cut", len(rep.Lost))
	}
}
