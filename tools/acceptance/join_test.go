package acceptance

import (
	"testing"
	"time"
)

// Issue test 3 of federating edges: a solo fibrild holding 10,000
// unconsumed messages in two queues (one durable, one buffered) becomes
// node n1 of a three-node cluster (the same data directory, [cluster]
// added, a restart). It keeps owning both queues at epoch 1, followers
// are placed and catch up from its logs, publishing goes on through every
// node, each queue is drained through a node that does not own it,
// nothing confirmed is lost, and every copy ends identical.
func TestClusterSoloJoinsWithData(t *testing.T) {
	ctx := caseCtx(t, 4*time.Minute)
	e := prepareClusterEnv(t, ctx, clusterFS(t))
	solo := &Broker{Bin: e.nodes[0].Bin, DataDir: e.nodes[0].DataDir, Args: []string{"--storage.segment_size", "1MiB"}}
	t.Cleanup(solo.Kill)
	if err := solo.Start(ctx); err != nil {
		t.Fatal(err)
	}
	queues := bothModes("join")
	const backlog = 10000
	r, err := StartLoad(ctx, LoadOptions{Addr: solo.Addr(), History: e.h, Queues: queues, Consumers: -1,
		Seed: e.seed, Prefix: "solo"})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.WaitConfirmed(ctx, backlog); err != nil {
		t.Fatalf("solo load: %v", err)
	}
	r.Stop()
	held := int64(0)
	for _, q := range queues {
		info, err := solo.QueueInfo(ctx, q.Name)
		if err != nil {
			t.Fatal(err)
		}
		held += info.Messages
	}
	if held < backlog {
		t.Fatalf("the solo broker holds %d messages, want at least %d", held, backlog)
	}
	if err := solo.Stop(30 * time.Second); err != nil {
		t.Fatalf("stop the solo broker: %v", err)
	}
	e.h.Restart()
	e.schedule("solo n1 stopped holding %d messages; the cluster starts", held)

	e.startAll(ctx)
	for _, q := range queues {
		if i, epoch := e.owner(ctx, q.Name, 0); i != 0 || epoch != 1 {
			t.Fatalf("%s is owned by %s at epoch %d after the join, want n1 at epoch 1", q.Name, e.ids[i], epoch)
		}
	}
	more, err := StartLoad(ctx, LoadOptions{Addr: e.addrs, History: e.h, Queues: queues, Consumers: -1,
		Seed: e.seed, Prefix: "joined", Rate: 300})
	if err != nil {
		t.Fatal(err)
	}
	if err := more.WaitConfirmed(ctx, 600); err != nil {
		t.Fatalf("publishing after the join: %v", err)
	}
	e.stopLoad(more)
	e.copiesCaughtUp(ctx)
	for qi, q := range queues {
		through := e.nodes[1+qi] // a node that does not own the queue
		n, err := Drain(ctx, e.h, through.Addr(), e.nodes[0].Admin(), []QueueSpec{q})
		if err != nil {
			t.Fatalf("drain %s through %s: %v", q.Name, e.ids[1+qi], err)
		}
		e.schedule("%s: %d messages drained through %s", q.Name, n, e.ids[1+qi])
	}
	rep := judge(t, e.h, queues, e.seed, e.sched)
	if len(rep.Lost) != 0 {
		t.Fatalf("joining the cluster lost %d confirmed messages", len(rep.Lost))
	}
	e.copiesIdentical(queues)
}
