package acceptance

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Case 9, the soak (make soak, not in CI): FIBRIL_SOAK_DURATION (default
// 10m) of load aiming at 10,000 publishes a second over a durable and a
// buffered queue on loop-mounted XFS, with 4 MiB segments (rollovers),
// 1 s checkpoints and acking consumers (retention), and a SIGKILL or a
// power cut every 20 to 60 s. Every 5 s it logs the confirm rate, the
// durable lag (the oldest unsynced record's age, per queue), the daemon's
// RSS and open files, and the disk in use; at the end the checker runs.
// soakDuration skips t unless FIBRIL_SOAK is set (target names the make
// target that sets it) and returns FIBRIL_SOAK_DURATION, or def.
func soakDuration(t *testing.T, target string, def time.Duration) time.Duration {
	t.Helper()
	if os.Getenv("FIBRIL_SOAK") == "" {
		t.Skipf("soak: set FIBRIL_SOAK=1 (%s)", target)
	}
	s := os.Getenv("FIBRIL_SOAK_DURATION")
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("FIBRIL_SOAK_DURATION=%q: %v", s, err)
	}
	return d
}

func TestSoak(t *testing.T) {
	dur := soakDuration(t, "make soak", 10*time.Minute)
	ctx := caseCtx(t, dur+5*time.Minute)
	e := newCaseEnvSize(t, ctx, "xfs", 2<<30, "--storage.segment_size", "4MiB", "--storage.checkpoint_delay", "1s")
	queues := bothModes("soak")
	r, err := StartLoad(ctx, LoadOptions{Addr: e.b.Addr(), Admin: e.b.Admin, History: e.h, Queues: queues,
		Publishers: 4, Consumers: 2, Window: 256, Rate: 10000 / 8, Prefetch: 200, Seed: e.seed, Prefix: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	end := time.Now().Add(dur)
	nextFault := time.Now().Add(e.between(20*time.Second, 60*time.Second))
	sample := time.NewTicker(5 * time.Second)
	defer sample.Stop()
	var peak soakSample
	last, lastAt := r.Counts().Confirmed, time.Now()
	for faults := 0; time.Now().Before(end); {
		select {
		case <-sample.C:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		now := r.Counts().Confirmed
		s := e.soakSample(ctx, queues, float64(now-last)/time.Since(lastAt).Seconds())
		last, lastAt = now, time.Now()
		t.Log(s)
		peak = peak.max(s)
		if time.Now().After(nextFault) {
			if err := r.RecordFrontiers(ctx); err != nil {
				t.Logf("frontiers: %v", err)
			}
			if faults%2 == 0 {
				e.schedule("fault %d: SIGKILL", faults)
				e.kill()
			} else {
				e.schedule("fault %d: power cut", faults)
				e.powerCut(ctx)
			}
			e.restart(ctx)
			faults++
			nextFault = time.Now().Add(e.between(20*time.Second, 60*time.Second))
		}
	}
	r.Stop()
	rep := e.verify(ctx, queues)
	logLosses(t, rep, queues)
	t.Logf("peaks: %s", peak)
}

type soakSample struct {
	rate      float64
	lagMs     map[string]int64
	rss, fds  int64
	diskBytes int64
}

func (s soakSample) String() string {
	var lag []string
	for _, q := range sortedKeys(s.lagMs) {
		lag = append(lag, fmt.Sprintf("%s %d ms", q, s.lagMs[q]))
	}
	return fmt.Sprintf("confirms %.0f/s, durable lag [%s], RSS %d MiB, %d fds, disk %d MiB",
		s.rate, strings.Join(lag, ", "), s.rss>>20, s.fds, s.diskBytes>>20)
}

func (s soakSample) max(o soakSample) soakSample {
	out := soakSample{rate: max(s.rate, o.rate), rss: max(s.rss, o.rss), fds: max(s.fds, o.fds),
		diskBytes: max(s.diskBytes, o.diskBytes), lagMs: map[string]int64{}}
	for k, v := range s.lagMs {
		out.lagMs[k] = v
	}
	for k, v := range o.lagMs {
		out.lagMs[k] = max(out.lagMs[k], v)
	}
	return out
}

// soakSample reads the durable lag from the admin API, RSS and open files
// from /proc, and the disk in use from statfs.
func (e *caseEnv) soakSample(ctx context.Context, queues []QueueSpec, rate float64) soakSample {
	s := soakSample{rate: rate, lagMs: map[string]int64{}}
	for _, q := range queues {
		qi, err := e.b.QueueInfo(ctx, q.Name)
		if err != nil {
			continue
		}
		for _, p := range qi.Partitions {
			s.lagMs[q.Name] = max(s.lagMs[q.Name], p.OldestUnsyncedMs)
		}
	}
	if p := e.b.Proc(); p != nil {
		if u, err := p.Usage(); err == nil {
			s.rss = u.RSS
		}
		if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.Pid())); err == nil {
			s.fds = int64(len(fds))
		}
	}
	var st syscall.Statfs_t
	if e.loop != nil && syscall.Statfs(e.loop.Mnt, &st) == nil {
		s.diskBytes = int64(st.Blocks-st.Bfree) * st.Bsize
	}
	return s
}
