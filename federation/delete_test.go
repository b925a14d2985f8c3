package federation

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/federation/replication"
	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/wal"
)

// A queue deleted through a node that does not serve it leaves every
// node's state, its owner's broker and every follower's disk; declared
// again under the same name (in the other mode) it starts from nothing,
// and its new copies hold the new queue's records only.
func TestDeleteAndRedeclare(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "del", Partitions: 2}, "")
	publishN(t, owner.broker, "del", "old", 300)
	nodes.copiesMatch(t, "del", (*wal.Log).WrittenNext)
	st := owner.cluster.Node().State()
	inc := st.Queues["del"].Incarnation
	type copyRef struct {
		node *clusterNode
		part int
		log  *wal.Log
	}
	var copies []copyRef
	for _, a := range st.Assignments["del"] {
		for _, f := range a.Followers {
			l, _ := nodes[f].cluster.Follower().Log("del", a.Partition)
			copies = append(copies, copyRef{nodes[f], a.Partition, l})
		}
	}
	var via *clusterNode
	for _, n := range nodes {
		if n != owner {
			via = n
		}
	}
	if err := via.cluster.DeleteQueue(ctx, "del"); err != nil {
		t.Fatalf("delete through %s: %v", via.id, err)
	}
	if err := via.cluster.DeleteQueue(ctx, "del"); !errors.Is(err, appliance.ErrNotFound) {
		t.Fatalf("delete of a deleted queue: %v, want not found", err)
	}
	for _, n := range nodes {
		await.Until(t, ctx, n.id+" to drop del from its state", func() bool {
			_, q := n.cluster.Node().State().Queues["del"]
			_, a := n.cluster.Node().State().Assignments["del"]
			return !q && !a
		})
	}
	await.Until(t, ctx, "the owner's broker to delete del", func() bool {
		_, err := owner.broker.QueueInfo("del")
		return errors.Is(err, appliance.ErrNotFound)
	})
	for _, c := range copies {
		await.Until(t, ctx, fmt.Sprintf("%s to remove its copy of del/%d", c.node.id, c.part), func() bool {
			_, open := c.node.cluster.Follower().Log("del", c.part)
			_, err := c.node.fs.Stat(c.node.fs.PathJoin("replicas", "del", fmt.Sprint(inc), fmt.Sprint(c.part)))
			return !open && err != nil
		})
		if err := c.log.Sync(ctx); !errors.Is(err, wal.ErrClosed) {
			t.Fatalf("%s's removed copy of del/%d is not closed: %v", c.node.id, c.part, err)
		}
	}
	for _, n := range nodes {
		await.Until(t, ctx, n.id+" to hold no directory for del", func() bool {
			_, err := n.fs.Stat(n.fs.PathJoin("replicas", "del"))
			return err != nil
		})
	}

	// The same name again, in the other mode.
	owner = nodes.declare(t, via.id, appliance.QueueConfig{Name: "del", Durability: appliance.Durable, Partitions: 1}, "")
	if again := owner.cluster.Node().State().Queues["del"].Incarnation; again <= inc {
		t.Fatalf("re-declared incarnation %d, the first was %d", again, inc)
	}
	publishN(t, owner.broker, "del", "new", 100)
	for _, recs := range nodes.copiesMatch(t, "del", (*wal.Log).WrittenNext) {
		if len(recs) == 0 {
			t.Fatal("an empty copy of the new queue")
		}
		for _, r := range recs {
			if bytes.Contains(r.Payload, []byte("old-")) {
				t.Fatalf("the new queue's copy holds an old record at %d", r.Offset)
			}
		}
	}
	for _, n := range nodes {
		ids, err := n.cluster.Follower().Copies()
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if id.Incarnation == inc {
				t.Fatalf("%s still holds %s", n.id, id)
			}
		}
	}
}

// A node walks its copies' directories to remove those the control state
// no longer assigns to it only when it cannot tell which those are:
// declaring queues, which only adds copies, walks nothing (with a
// thousand queues, a walk after every declaration made declaring them
// quadratic), and deleting one removes its copies without a walk, the
// owner's once its broker closed the queue.
func TestDeclarationsDoNotWalkTheCopies(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	nodes.declare(t, "n1", appliance.QueueConfig{Name: "first"}, "")
	nodes.copiesMatch(t, "first", (*wal.Log).WrittenNext)
	walks := map[string]int64{}
	for id, n := range nodes {
		walks[id] = n.removed.walks.Load()
	}
	for i := range 10 {
		nodes.declare(t, "n1", appliance.QueueConfig{Name: fmt.Sprintf("more-%d", i)}, "")
	}
	for i := range 10 {
		nodes.copiesMatch(t, fmt.Sprintf("more-%d", i), (*wal.Log).WrittenNext)
	}
	for id, n := range nodes {
		if got := n.removed.walks.Load() - walks[id]; got != 0 {
			t.Errorf("%s walked its copies %d times for 10 declarations", id, got)
		}
	}
	// The owner's copy is its broker's log: it goes once the broker closed
	// the queue (the cluster no longer records it served), not while the
	// broker may still write to it.
	owner := nodes[nodes["n1"].cluster.Node().State().Assignments["more-3"][0].Owner]
	inc := nodes["n1"].cluster.Node().State().Queues["more-3"].Incarnation
	owner.removed.watchInUse(func(path string) bool {
		return strings.Contains(path, "more-3") && owner.cluster.brokerServes(replication.CopyID{Queue: "more-3", Incarnation: inc})
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := nodes["n2"].cluster.DeleteQueue(ctx, "more-3"); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		await.Within(t, time.Minute, n.id+" to remove its copy of the deleted queue", func() bool {
			return n.cluster.Follower().NewestIncarnation("more-3", 0) == 0 // reads the queue's directory only
		})
	}
	if early := owner.removed.removedEarly(); len(early) > 0 {
		t.Errorf("the owner %s removed %v while its broker still served the queue", owner.id, early)
	}
	for id, n := range nodes {
		if got := n.removed.walks.Load() - walks[id]; got != 0 {
			t.Errorf("%s walked its copies %d times for 10 declarations and a deletion", id, got)
		}
		ids, err := n.cluster.Follower().Copies()
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(ids, func(id replication.CopyID) bool { return id.Queue == "more-3" }) {
			t.Errorf("%s still holds a copy of the deleted queue: %v", id, ids)
		}
		if len(ids) != 10 {
			t.Errorf("%s holds %d copies, want the other 10 queues': %v", id, len(ids), ids)
		}
	}
}

// A follower accepts a stream only from the partition's owner, for a
// partition it follows, of the queue's current incarnation.
func TestFollowerRefusesUnassignedStreams(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "guarded"}, "")
	a := owner.cluster.Node().State().Assignments["guarded"][0]
	follower, bystander := nodes[a.Followers[0]], nodes[a.Followers[1]]
	ask := func(h replication.Hello) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return follower.cluster.accept(ctx, h)
	}
	good := replication.Hello{Epoch: a.Epoch, Incarnation: a.Incarnation, Queue: "guarded", Owner: a.Owner}
	if err := ask(good); err != nil {
		t.Fatalf("the owner's stream refused: %v", err)
	}
	impostor := good
	impostor.Owner = bystander.id
	unknown := good
	unknown.Partition = 5
	stale := good
	stale.Incarnation = a.Incarnation - 1
	for _, c := range []struct {
		h    replication.Hello
		want string
	}{
		{impostor, "is owned by " + a.Owner + ", not " + bystander.id},
		{unknown, "no partition guarded/5"},
		{stale, "is incarnation"},
	} {
		if err := ask(c.h); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("hello %+v: %v, want a refusal naming %q", c.h, err, c.want)
		}
	}

	// Through the cluster port: the bystander's stream for the partition
	// is refused with the reason, and the copy is not touched.
	var before *wal.Log
	await.Within(t, 30*time.Second, follower.id+" to open its copy of guarded/0", func() bool {
		l, ok := follower.cluster.Follower().Log("guarded", 0)
		before = l
		return ok
	})
	refused := make(chan string, 1)
	ol, err := wal.Open("impostor", wal.Options{FS: vfs.NewMem(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer ol.Close()
	s := replication.StartSender(replication.SenderOptions{Hello: impostor, Follower: follower.id, Addr: follower.clusterAddr,
		Dial: bystander.cluster.Node().DialReplica, Log: ol, Gate: replication.NewGate(replication.Written, 1, nil),
		Logger: slog.New(errCapture{refused})})
	defer s.Close()
	select {
	case reason := <-refused:
		if !strings.Contains(reason, "follower refused") || !strings.Contains(reason, "is owned by "+a.Owner) {
			t.Fatalf("impostor's stream ended with %q", reason)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the impostor's stream was not refused")
	}
	if after, _ := follower.cluster.Follower().Log("guarded", 0); after != before {
		t.Fatal("the impostor's stream replaced the copy")
	}
}

// errCapture passes the err attribute of each log record to a channel
// (dropping it when the channel is full).
type errCapture struct{ errs chan<- string }

func (h errCapture) Enabled(context.Context, slog.Level) bool { return true }
func (h errCapture) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h errCapture) WithGroup(string) slog.Handler            { return h }
func (h errCapture) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			select {
			case h.errs <- a.Value.String():
			default:
			}
		}
		return true
	})
	return nil
}

// A follower restarted in process opens with an empty control state that
// raft then replays: its copies stay on disk through it (nothing is
// removed before the state is back), and the streams resume them where
// they ended.
func TestRestartKeepsCopies(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	owner := nodes.declare(t, "n2", appliance.QueueConfig{Name: "kept", Partitions: 2}, "")
	publishN(t, owner.broker, "kept", "before", 200)
	nodes.copiesMatch(t, "kept", (*wal.Log).WrittenNext)
	a := owner.cluster.Node().State().Assignments["kept"][0]
	f := nodes[a.Followers[0]]
	ends := map[int]uint64{}
	for part := range 2 {
		l, ok := f.cluster.Follower().Log("kept", part)
		if !ok {
			t.Fatalf("%s has no copy of kept/%d", f.id, part)
		}
		ends[part] = l.WrittenNext()
	}
	f.restart(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	select {
	case <-f.cluster.Node().Replayed():
	case <-ctx.Done():
		t.Fatal("the restarted node's state did not replay")
	}
	publishN(t, owner.broker, "kept", "after", 100)
	nodes.copiesMatch(t, "kept", (*wal.Log).WrittenNext)
	for part, end := range ends {
		l, _ := f.cluster.Follower().Log("kept", part)
		if l.Head() != 0 || l.WrittenNext() <= end {
			t.Fatalf("kept/%d on %s after the restart: head %d, end %d (was %d)", part, f.id, l.Head(), l.WrittenNext(), end)
		}
	}
	if gone := f.removed.under("replicas"); len(gone) != 0 {
		t.Fatalf("%s removed %v across its restart", f.id, gone)
	}
}

// A queue only this node's broker has (a dead-letter queue lives on its
// owner only) is deleted from the broker; a queue nobody has is not found.
func TestDeleteLocalOnlyQueue(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := nodes["n2"]
	if _, err := n.broker.Declare(ctx, appliance.QueueConfig{Name: "local-dlq"}); err != nil {
		t.Fatal(err)
	}
	if err := n.cluster.DeleteQueue(ctx, "local-dlq"); err != nil {
		t.Fatalf("delete a queue only n2's broker has: %v", err)
	}
	if _, err := n.broker.QueueInfo("local-dlq"); !errors.Is(err, appliance.ErrNotFound) {
		t.Fatalf("after the delete n2's broker answers %v, want not found", err)
	}
	if err := n.cluster.DeleteQueue(ctx, "nowhere"); !errors.Is(err, appliance.ErrNotFound) {
		t.Fatalf("delete an unknown queue: %v, want not found", err)
	}
}
