package acceptance

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// recoveryLogMiB is the log size of case 7: 64 MiB in CI, more with
// FIBRIL_RECOVERY_MIB (the plan asks for a few hundred MiB).
func recoveryLogMiB(t *testing.T) int64 {
	if s := os.Getenv("FIBRIL_RECOVERY_MIB"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			t.Fatalf("FIBRIL_RECOVERY_MIB=%q", s)
		}
		return n
	}
	return 64
}

// Case 7: SIGKILL during recovery, 10 times in a row, at a random moment
// up to 2 s after the start, on a log that start-up must replay (no
// checkpoint: the delay is an hour). The broker must then start with
// identical content: the same unsettled messages, bytes and frontiers,
// and the drain finds every confirmed, unacked message and nothing else.
func TestKillDuringRecovery(t *testing.T) {
	ctx := caseCtx(t, 4*time.Minute)
	e := newCaseEnv(t, ctx, "", "--storage.checkpoint_delay", "1h")
	queues := []QueueSpec{{Name: "recover", Partitions: 4}}
	const body = 4000
	target := recoveryLogMiB(t) << 20 / (body + 100)
	r, err := StartLoad(ctx, LoadOptions{Addr: e.b.Addr(), History: e.h, Queues: queues, Consumers: -1,
		Publishers: 4, Window: 256, Seed: e.seed, Prefix: "rec", BodySize: body})
	if err != nil {
		t.Fatal(err)
	}
	err = r.WaitConfirmed(ctx, target)
	r.Stop()
	if err != nil {
		t.Fatal(err)
	}
	before, err := e.b.QueueInfo(ctx, "recover")
	if err != nil {
		t.Fatal(err)
	}
	acked := e.ackSome(ctx, "recover", int(target/5))
	if err := awaitQueue(ctx, e.b, "recover", func(qi QueueInfo) bool {
		return qi.Messages == before.Messages-int64(acked) && qi.InFlight == 0
	}); err != nil {
		t.Fatalf("acks not applied: %v", err)
	}
	if before, err = e.b.QueueInfo(ctx, "recover"); err != nil {
		t.Fatal(err)
	}
	e.kill()
	t.Logf("log: %d MiB of records (%d MiB of preallocated segment files), %d messages, %d unsettled",
		target*(body+100)>>20, segmentBytes(t, e.b.DataDir)>>20, target, before.Messages)

	// One timed recovery, to place the kills.
	e.h.Restart()
	start := time.Now()
	if err := e.b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	e.kill()
	// At 0 to 2 s after the start, narrowed to the time a start-up takes
	// so that most kills land in the recovery itself.
	window := min(2*time.Second, max(took, 200*time.Millisecond))
	t.Logf("a full start-up takes %v; kills at random in [0, %v)", took.Round(time.Millisecond), window)
	during := 0
	for i := range 10 {
		d := e.between(0, window)
		e.h.Restart()
		listening, err := e.b.StartAndKillAfter(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		e.h.Fault("SIGKILL during start-up")
		if !listening {
			during++
		}
		e.schedule("kill %d at %v after the start (listening: %v)", i, d, listening)
	}
	t.Logf("%d of 10 kills landed before the broker listened", during)
	e.restart(ctx)
	after, err := e.b.QueueInfo(ctx, "recover")
	if err != nil {
		t.Fatal(err)
	}
	if d := stateDiff(before, after); d != "" {
		t.Fatalf("content after the kills differs: %s", d)
	}
	rep := e.verify(ctx, queues)
	if len(rep.Lost) != 0 || len(rep.AckedReturned) != 0 || rep.Drained != int(before.Messages) {
		t.Fatalf("content changed: %d lost, %d acked returned, %d drained of %d", len(rep.Lost), len(rep.AckedReturned), rep.Drained, before.Messages)
	}
}

// segmentBytes sums the sizes of the segment files under dir.
func segmentBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".seg" {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
