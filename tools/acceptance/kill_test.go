package acceptance

import (
	"testing"
	"time"
)

// Case 1: SIGKILL at random points under load, at least 20 times, with a
// durable and a buffered queue loaded at once. The page cache survives a
// process crash, so neither mode may lose anything confirmed.
func TestKillUnderLoad(t *testing.T) {
	ctx := caseCtx(t, 3*time.Minute)
	e := newCaseEnv(t, ctx, "")
	queues := bothModes("kill")
	r, err := StartLoad(ctx, LoadOptions{Addr: e.b.Addr(), Admin: e.b.Admin, History: e.h, Queues: queues,
		Seed: e.seed, Prefix: "k", Rate: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	e.faultLoop(ctx, r, 20, 100, 10*time.Millisecond, 300*time.Millisecond, func(int) { e.kill() })
	r.Stop()
	rep := e.verify(ctx, queues)
	if len(rep.Lost) != 0 {
		t.Fatalf("a process crash lost %d confirmed messages", len(rep.Lost))
	}
	if rep.Confirmed < 20*100 {
		t.Fatalf("only %d confirms in the run", rep.Confirmed)
	}
}
