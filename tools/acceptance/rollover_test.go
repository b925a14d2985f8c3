package acceptance

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Case 3b: a power cut during a segment rollover never loses a middle
// segment. 1 MiB segments and 4 KB messages that nobody consumes (so
// retention removes nothing) roll a partition over every ~250 messages;
// the case polls the admin API and cuts the power as soon as a
// partition's segment count grows, that is within milliseconds of the new
// segment's creation, before its header and directory entry are synced.
// A lost middle segment shows as a hole, or as a loss the durable
// frontier covered.
func TestPowerCutDuringRollover(t *testing.T) {
	for _, fsType := range []string{"xfs", "ext4"} {
		t.Run(fsType, func(t *testing.T) {
			ctx := caseCtx(t, 3*time.Minute)
			e := newCaseEnv(t, ctx, fsType, "--storage.segment_size", "1MiB")
			queues := bothModes("roll")
			r, err := StartLoad(ctx, LoadOptions{Addr: e.b.Addr(), Admin: e.b.Admin, History: e.h, Queues: queues,
				Consumers: -1, Seed: e.seed, Prefix: "r", BodySize: 4000, Rate: 800, FrontierEvery: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Stop()
			for i := range 8 {
				if err := r.WaitConfirmed(ctx, r.Counts().Confirmed+100); err != nil {
					t.Fatal(err)
				}
				seen := e.awaitRollover(ctx, queues)
				if err := r.RecordFrontiers(ctx); err != nil {
					t.Logf("frontiers: %v", err)
				}
				e.schedule("cycle %d: power cut at a rollover (%s)", i, seen)
				e.powerCut(ctx)
				e.schedule("cycle %d: after the cut: %s", i, segmentList(t, e.b.DataDir))
				e.restart(ctx)
			}
			if err := r.WaitConfirmed(ctx, r.Counts().Confirmed+100); err != nil {
				t.Fatal(err)
			}
			checkServed(t, ctx, e.b, queues)
			r.Stop()
			logLosses(t, e.verify(ctx, queues), queues)
		})
	}
}

// awaitRollover polls the queues' segment counts every 2 ms and returns
// once one grows, naming it.
func (e *caseEnv) awaitRollover(ctx context.Context, queues []QueueSpec) string {
	e.t.Helper()
	base := map[string]int{}
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for first := true; ; first = false {
		for _, q := range queues {
			qi, err := e.b.QueueInfo(ctx, q.Name)
			if err != nil {
				e.t.Fatal(err)
			}
			for _, p := range qi.Partitions {
				k := q.Name + "/" + itoa(int64(p.Index))
				if !first && p.Segments > base[k] {
					return k + " to " + itoa(int64(p.Segments)) + " segments"
				}
				base[k] = p.Segments
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			e.t.Fatalf("no rollover: %v", ctx.Err())
		}
	}
}

// segmentList names every segment file under dir with its size.
func segmentList(t *testing.T, dir string) string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.Contains(path, ".seg") {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out = append(out, fmt.Sprintf("%s=%d", rel, info.Size()))
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return strings.Join(out, " ")
}
