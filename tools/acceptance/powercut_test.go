package acceptance

import (
	"context"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// powerCutArgs: small segments (a rollover every MiB) and quick
// checkpoints (retention moving the head), so cuts land among rollovers
// and checkpoints too.
var powerCutArgs = []string{"--storage.segment_size", "1MiB", "--storage.checkpoint_delay", "300ms"}

// Case 2: real power cuts of the file system under a loaded broker, at
// least 10 per mode on XFS and on ext4: FS_IOC_SHUTDOWN without log flush
// (the kernel drops everything not synced, the running broker gets EIO),
// SIGKILL, unmount, mount, restart. Durable: nothing confirmed lost, no
// holes. Buffered: losses only past the durable frontier recorded before
// the cut, reported with their age; the queue recovers and serves.
func TestPowerCut(t *testing.T) {
	for _, fsType := range []string{"xfs", "ext4"} {
		t.Run(fsType, func(t *testing.T) {
			ctx := caseCtx(t, 3*time.Minute)
			e := newCaseEnv(t, ctx, fsType, powerCutArgs...)
			// Consumed queues, and backlog queues nobody reads, where a
			// loss cannot hide behind an ack.
			consumed, backlog := bothModes("cut"), bothModes("backlog")
			queues := append(append([]QueueSpec(nil), consumed...), backlog...)
			r, err := StartLoad(ctx, LoadOptions{Addr: e.b.Addr(), Admin: e.b.Admin, History: e.h, Queues: consumed,
				Seed: e.seed, Prefix: "c", BodySize: 1000, Rate: 1000, FrontierEvery: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Stop()
			rb, err := StartLoad(ctx, LoadOptions{Addr: e.b.Addr(), Admin: e.b.Admin, History: e.h, Queues: backlog,
				Consumers: -1, Seed: e.seed + 1, Prefix: "b", BodySize: 1000, Rate: 500, FrontierEvery: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer rb.Stop()
			var segs, empty int
			e.faultLoop(ctx, r, 10, 200, 20*time.Millisecond, 400*time.Millisecond, func(i int) {
				if err := rb.RecordFrontiers(ctx); err != nil {
					t.Logf("cycle %d: frontiers: %v", i, err)
				}
				e.powerCut(ctx)
				s, z := segmentFiles(t, e.b.DataDir)
				segs, empty = segs+s, empty+z
				e.schedule("cycle %d: after the cut %d segment files, %d of them empty", i, s, z)
			})
			checkServed(t, ctx, e.b, queues)
			r.Stop()
			rb.Stop()
			rep := e.verify(ctx, queues)
			t.Logf("%s: %d segment files seen after the cuts, %d zero-length", fsType, segs, empty)
			logLosses(t, rep, queues)
		})
	}
}

// segmentFiles counts the segment files under dir and those of length
// zero.
func segmentFiles(t *testing.T, dir string) (n, empty int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".seg") {
			return err
		}
		n++
		if info, err := d.Info(); err == nil && info.Size() == 0 {
			empty++
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return n, empty
}

// checkServed fails t unless every queue is open, not latched, and
// listed with no failed queue.
func checkServed(t *testing.T, ctx context.Context, b *Broker, queues []QueueSpec) {
	t.Helper()
	for _, q := range queues {
		qi, err := b.QueueInfo(ctx, q.Name)
		if err != nil {
			t.Fatalf("queue %s after restart: %v", q.Name, err)
		}
		if qi.Unavailable != "" {
			t.Fatalf("queue %s unavailable after restart: %s", q.Name, qi.Unavailable)
		}
		for _, p := range qi.Partitions {
			if p.Latched {
				t.Fatalf("queue %s partition %d latched after restart: %s", q.Name, p.Index, p.LastError)
			}
		}
	}
}

// logLosses logs, per queue, the lost confirms, those confirmed after the
// cut began, and the oldest loss against its cut and the last sync.
func logLosses(t *testing.T, rep Report, queues []QueueSpec) {
	t.Helper()
	for _, q := range queues {
		lost, afterCut := 0, 0
		for _, l := range rep.Lost {
			if l.Queue == q.Name {
				lost++
				if l.AfterCut {
					afterCut++
				}
			}
		}
		if o, ok := rep.OldestLoss(q.Name); ok {
			t.Logf("%s: %d lost confirms, %d of them confirmed after the cut began; oldest %v before its cut, confirmed %v after the last completed sync",
				q.Name, lost, afterCut, o.Age.Round(time.Millisecond), o.SinceSync().Round(time.Millisecond))
		} else {
			t.Logf("%s: no confirm lost", q.Name)
		}
	}
}
