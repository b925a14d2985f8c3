package acceptance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Helpers of the crash and power-cut cases (1, 2, 3, 4 and 7).

// caseSeed is FIBRIL_SEED when set (to replay a run), else a fresh seed;
// either way it is logged.
func caseSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("FIBRIL_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("FIBRIL_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (replay: FIBRIL_SEED=%d FIBRIL_ACCEPTANCE=1 go test -run '^%s$' ./tools/acceptance/)", seed, seed, t.Name())
	return seed
}

// caseEnv is one case's broker, history and (for power cuts) loop file
// system.
type caseEnv struct {
	t        *testing.T
	dir      string // on the host's temp file system: never under test
	h        *History
	loop     *LoopFS // nil: the data directory is on dir's file system
	b        *Broker
	rng      *rand.Rand
	seed     uint64
	sched    []string
	started  time.Time
	ckpt     *checkpointLog // the checkpoints the broker's log names
	ackedIDs []string       // acked by ackSome, in order
}

// newCaseEnv builds fibrild, creates the history and, when fs is "xfs"
// or "ext4", a loop-mounted file system for the data directory. A
// machine that cannot loop-mount fails the case, loudly.
func newCaseEnv(t *testing.T, ctx context.Context, fs string, args ...string) *caseEnv {
	t.Helper()
	return newCaseEnvSize(t, ctx, fs, 0, args...)
}

// newCaseEnvSize is newCaseEnv with a loop image of size bytes (0: the
// LoopOptions default).
func newCaseEnvSize(t *testing.T, ctx context.Context, fs string, size int64, args ...string) *caseEnv {
	t.Helper()
	requireAcceptanceGate(t)
	seed := caseSeed(t)
	e := &caseEnv{t: t, dir: t.TempDir(), seed: seed, rng: rand.New(rand.NewPCG(seed, 0x5eed)), started: time.Now()}
	bin := filepath.Join(e.dir, "fibrild")
	if err := BuildFibrild(ctx, "../fibrild", bin); err != nil {
		t.Fatal(err)
	}
	h, err := CreateHistory(filepath.Join(e.dir, "history.jsonl"), 0)
	if err != nil {
		t.Fatal(err)
	}
	e.h = h
	t.Cleanup(func() {
		h.Close()
		if t.Failed() { // keep the history of a failed run for study
			kept := filepath.Join(os.TempDir(), "fibril-acceptance-"+strings.ReplaceAll(t.Name(), "/", "-")+".jsonl")
			if b, err := os.ReadFile(h.Path()); err == nil && os.WriteFile(kept, b, 0o644) == nil {
				t.Logf("history kept in %s", kept)
			}
		}
	})
	data := filepath.Join(e.dir, "data")
	if fs != "" {
		l, err := NewLoopFS(ctx, LoopOptions{FS: fs, Dir: e.dir, Size: size})
		if err != nil {
			t.Fatalf("THIS CASE NEEDS A LOOP-MOUNTED %s FILE SYSTEM AND CANNOT HAVE ONE: %v", strings.ToUpper(fs), err)
		}
		e.loop = l
		t.Cleanup(func() {
			if err := l.Close(); err != nil {
				t.Errorf("loop fs: %v", err)
			}
		})
		data = filepath.Join(l.Mnt, "data")
	}
	e.ckpt = newCheckpointLog()
	e.b = &Broker{Bin: bin, DataDir: data, Args: args, Log: e.ckpt}
	t.Cleanup(e.b.Kill) // runs before the loop fs's Close
	h.Note("case %s seed %d fs %q args %q", t.Name(), seed, fs, args)
	if err := e.b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return e
}

// schedule records one step of the fault schedule in the history and the
// test log.
func (e *caseEnv) schedule(format string, args ...any) {
	s := fmt.Sprintf("%7.3fs ", time.Since(e.started).Seconds()) + fmt.Sprintf(format, args...)
	e.sched = append(e.sched, s)
	e.h.Note("schedule: %s", s)
}

// powerCut cuts the loop file system's power under the running broker,
// kills the broker, and mounts the file system again.
func (e *caseEnv) powerCut(ctx context.Context) {
	e.t.Helper()
	e.h.CutBegins()
	if err := e.loop.PowerCut(ctx); err != nil {
		e.t.Fatal(err)
	}
	e.b.Kill()
	e.h.Fault("power cut " + e.loop.FSType())
	if err := e.loop.Unmount(ctx); err != nil {
		e.t.Fatal(err)
	}
	if err := e.loop.Mount(ctx); err != nil {
		e.t.Fatal(err)
	}
}

// kill SIGKILLs the broker.
func (e *caseEnv) kill() {
	e.b.Kill()
	e.h.Fault("SIGKILL")
}

// restart starts the broker again after a fault.
func (e *caseEnv) restart(ctx context.Context) {
	e.t.Helper()
	e.h.Restart()
	if err := e.b.Start(ctx); err != nil {
		e.t.Fatalf("restart after the fault: %v\nschedule:\n%s", err, strings.Join(e.sched, "\n"))
	}
}

// verify drains the queues and checks the whole history; it fails the
// test on anything the queues' promises forbid and returns the report.
func (e *caseEnv) verify(ctx context.Context, queues []QueueSpec) Report {
	e.t.Helper()
	if _, err := Drain(ctx, e.h, e.b.Addr(), e.b.Admin(), queues); err != nil {
		e.t.Fatalf("drain: %v\nschedule:\n%s", err, strings.Join(e.sched, "\n"))
	}
	return judge(e.t, e.h, queues, e.seed, e.sched)
}

// judge checks the whole history, logs the schedule and the report, and
// fails t on any failure the queues' promises forbid.
func judge(t *testing.T, h *History, queues []QueueSpec, seed uint64, sched []string) Report {
	t.Helper()
	rep, err := VerifyHistory(h.Path(), queues)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seed %d, schedule:\n%s\nreport:\n%s", seed, strings.Join(sched, "\n"), rep)
	if f := rep.Failures(); len(f) > 0 {
		t.Fatalf("%d failures (seed %d); history %s", len(f), seed, h.Path())
	}
	return rep
}

// between returns a random duration in [lo, hi).
func (e *caseEnv) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(e.rng.Int64N(int64(hi-lo)))
}

// pause waits d (a point of the fault schedule, not a synchronisation)
// or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// bothModes are a durable and a buffered queue, two partitions each.
func bothModes(prefix string) []QueueSpec {
	return []QueueSpec{{Name: prefix + "-durable", Partitions: 2}, {Name: prefix + "-buffered", Buffered: true, Partitions: 2}}
}

// faultLoop runs n fault cycles under the load r: wait for progress
// (proof the broker serves), wait a random moment, record the
// frontiers, apply fault, restart.
func (e *caseEnv) faultLoop(ctx context.Context, r *Runner, n int, progress int64, lo, hi time.Duration, fault func(i int)) {
	e.t.Helper()
	for i := range n {
		if err := r.WaitConfirmed(ctx, r.Counts().Confirmed+progress); err != nil {
			e.t.Fatalf("cycle %d: the broker does not serve: %v\nschedule:\n%s\nlog:\n%s", i, err, strings.Join(e.sched, "\n"), lastLogLines(e.b, 30))
		}
		d := e.between(lo, hi)
		if err := pause(ctx, d); err != nil {
			e.t.Fatal(err)
		}
		if err := r.RecordFrontiers(ctx); err != nil && !errors.Is(err, context.Canceled) {
			e.t.Logf("cycle %d: frontiers: %v", i, err)
		}
		e.schedule("cycle %d: fault %v after progress", i, d)
		fault(i)
		e.restart(ctx)
	}
	if err := r.WaitConfirmed(ctx, r.Counts().Confirmed+progress); err != nil {
		e.t.Fatalf("after the last restart the broker does not serve: %v", err)
	}
}

func lastLogLines(b *Broker, n int) string {
	p := b.Proc()
	if p == nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(p.Log()), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// checkpointLog is a Broker.Log writer that keeps, per queue partition,
// the highest boundary of the checkpoints the daemon logged as stored
// (at debug level: msg="checkpoint stored" queue=q partition=0
// boundary=123).
type checkpointLog struct {
	mu       sync.Mutex
	boundary map[string]uint64 // "queue/partition"
	changed  chan struct{}
}

var checkpointLine = regexp.MustCompile(`msg="checkpoint stored" queue=(\S+) partition=(\d+) boundary=(\d+)`)

func newCheckpointLog() *checkpointLog {
	return &checkpointLog{boundary: map[string]uint64{}, changed: make(chan struct{}, 1)}
}

func (c *checkpointLog) Write(p []byte) (int, error) {
	for _, m := range checkpointLine.FindAllSubmatch(p, -1) {
		b, _ := strconv.ParseUint(string(m[3]), 10, 64)
		k := string(m[1]) + "/" + string(m[2])
		c.mu.Lock()
		c.boundary[k] = max(c.boundary[k], b)
		c.mu.Unlock()
		select {
		case c.changed <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// wait waits until every partition in want ("queue/partition" → offset)
// has a stored checkpoint whose boundary is at least that offset.
func (c *checkpointLog) wait(ctx context.Context, want map[string]uint64) error {
	for {
		c.mu.Lock()
		missing := ""
		for k, off := range want {
			if c.boundary[k] < off {
				missing = fmt.Sprintf("%s: boundary %d, want %d", k, c.boundary[k], off)
				break
			}
		}
		c.mu.Unlock()
		if missing == "" {
			return nil
		}
		select {
		case <-c.changed:
		case <-ctx.Done():
			return fmt.Errorf("no checkpoint logged: %s: %w", missing, ctx.Err())
		}
	}
}
