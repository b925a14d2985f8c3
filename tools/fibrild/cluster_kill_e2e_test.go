package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/admin"
	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/internal/waltest"
	"github.com/fibril-edge/fibril/wal"
)

// A three-process cluster keeps a durable queue (durable on 2 of 3)
// through SIGKILLs: with one follower killed publishes still confirm on
// the other two copies; with both followers killed and one restarted, the
// restarted follower catches up and publishes confirm again; the owner
// killed and restarted serves the queue again. Every confirmed message is
// consumed exactly once through a node that does not own the queue, and
// every follower's copy equals the owner's log record for record.
func TestClusterSurvivesKills(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three fibrild processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cp := startClusterProcs(t, ctx)
	var v admin.ClusterView
	dial := func(id string) *client.Client { return cp.dial(t, ctx, id) }
	if _, err := dial("n1").DeclareQueue(ctx, client.Queue("ledger").Durable()); err != nil {
		t.Fatal(err)
	}
	waitView(t, ctx, cp.procs["n1"].Admin, &v, func() bool { return len(v.Queues) == 1 })
	part := v.Queues[0].Partitions[0]
	owner, f1, f2 := part.Owner, part.Followers[0], part.Followers[1]
	t.Logf("owner %s, followers %s %s", owner, f1, f2)

	var confirmed []string
	pubNode := owner // the node publishes go to, whose log a failure shows
	publish := func(c *client.Client, phase string, n int) {
		t.Helper()
		futures := make([]*client.Future, n)
		for i := range futures {
			futures[i] = c.PublishAsync("ledger", client.Message{Body: []byte(fmt.Sprintf("%s-%d", phase, i))})
		}
		for i, f := range futures {
			if _, err := f.Wait(ctx); err != nil {
				t.Fatalf("%s: publish %d: %v\n%s's log:\n%s", phase, i, err, pubNode, cp.procs[pubNode].Log())
			}
			confirmed = append(confirmed, fmt.Sprintf("%s-%d", phase, i))
		}
	}
	const n = 500
	pub := dial(owner)
	publish(pub, "all-up", n)

	cp.procs[f1].Kill()
	publish(pub, "one-follower-down", n) // durable on the owner and f2

	cp.procs[f2].Kill()
	cp.start(t, ctx, f1) // f1 must catch up on what it missed for these to confirm
	publish(pub, "f1-back-f2-down", n)

	cp.start(t, ctx, f2)
	cp.procs[owner].Kill()
	cp.start(t, ctx, owner)
	pub = dial(owner)
	publish(pub, "owner-restarted", n)

	// Consume through a follower: every confirmed message exactly once.
	cons, err := dial(f2).Consume(ctx, "ledger", 200)
	if err != nil {
		var v3 admin.ClusterView
		waitView(t, ctx, cp.procs[f2].Admin, &v3, func() bool { return true })
		t.Fatalf("consume through %s: %v; its view %+v; owner at %s\n%s", f2, err, v3.Members, cp.procs[owner].Addr, cp.procs[owner].Log())
	}
	got := map[string]int{}
	for len(got) < len(confirmed) {
		select {
		case d, ok := <-cons.Messages():
			if !ok {
				t.Fatalf("consumer ended after %d of %d: %v", len(got), len(confirmed), cons.Err())
			}
			got[string(d.Body)]++
			if got[string(d.Body)] > 1 {
				t.Fatalf("%s delivered twice", d.Body)
			}
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d confirmed messages consumed", len(got), len(confirmed))
		}
	}
	for _, b := range confirmed {
		if got[b] != 1 {
			t.Fatalf("confirmed %s was not consumed", b)
		}
	}
	cons.Close()

	// Stop everything and compare the copies with the owner's log: the
	// owner's restart went through a recovery, which may have moved the
	// queue.
	waitView(t, ctx, cp.procs[f2].Admin, &v, func() bool { return len(v.Queues) == 1 && !v.Queues[0].Partitions[0].Recovering })
	owner = v.Queues[0].Partitions[0].Owner
	for _, id := range cp.ids {
		if err := cp.procs[id].Stop(30 * time.Second); err != nil {
			t.Fatalf("stop %s: %v", id, err)
		}
	}
	open := func(dir string) *wal.Log {
		t.Helper()
		l, err := wal.Open(dir, wal.Options{})
		if err != nil {
			t.Fatalf("open %s: %v", dir, err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	// replicas/<queue>/<incarnation>/<partition> on every node, owned or
	// followed: one incarnation here.
	logOf := func(id string) *wal.Log {
		t.Helper()
		dirs, err := filepath.Glob(filepath.Join(cp.opts[id].DataDir, "replicas", "ledger", "*", "0"))
		if err != nil || len(dirs) != 1 {
			t.Fatalf("%s's logs of ledger/0: %v %v", id, dirs, err)
		}
		return open(dirs[0])
	}
	ownerLog := logOf(owner)
	want := waltest.Records(t, ownerLog, ownerLog.WrittenNext())
	for _, f := range cp.ids {
		if f == owner {
			continue
		}
		copyLog := logOf(f)
		have := waltest.Records(t, copyLog, copyLog.WrittenNext())
		if len(have) < len(confirmed) || len(have) > len(want) {
			t.Fatalf("%s holds %d records; the owner %d, with %d publishes confirmed", f, len(have), len(want), len(confirmed))
		}
		if !slices.EqualFunc(have, want[:len(have)], func(a, b wal.Record) bool {
			return a.Offset == b.Offset && a.Type == b.Type && string(a.Payload) == string(b.Payload)
		}) {
			t.Fatalf("%s's copy differs from the owner's log", f)
		}
	}
}

// Issue test 4 across processes: the raft leader is SIGKILLed; the other
// two elect a new leader, keep the declaration and its copies (the queue
// the leader owned fails over to one of them), refuse a
// re-declare with the other mode, and take new declarations; the old
// leader restarts and sees all of it.
func TestClusterLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three fibrild processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp := startClusterProcs(t, ctx)
	var v admin.ClusterView
	leader := cp.leader
	var survivors []string
	for _, id := range cp.ids {
		if id != leader {
			survivors = append(survivors, id)
		}
	}
	dial := func(id string) *client.Client { return cp.dial(t, ctx, id) }
	if _, err := dial(survivors[0]).DeclareQueue(ctx, client.Queue("events").Buffered().Partitions(3)); err != nil {
		t.Fatalf("declare through %s: %v", survivors[0], err)
	}
	waitView(t, ctx, cp.procs[leader].Admin, &v, func() bool { return len(v.Queues) == 1 })
	// The placement's copies and policy: the owner and the epoch may
	// change, since losing the leader may fail its queues over.
	placement := func(q admin.ClusterQueue) string {
		var out []string
		for _, p := range q.Partitions {
			copies := append([]string{p.Owner}, p.Followers...)
			slices.Sort(copies)
			out = append(out, fmt.Sprint(p.Partition, copies, p.Reads))
		}
		return strings.Join(out, "; ")
	}
	placed := placement(v.Queues[0])

	cp.procs[leader].Kill()
	for _, id := range survivors {
		waitView(t, ctx, cp.procs[id].Admin, &v, func() bool { return v.Leader != "" && v.Leader != leader })
		if len(v.Queues) != 1 || v.Queues[0].Name != "events" || placement(v.Queues[0]) != placed {
			t.Fatalf("%s after the election: %+v, want events placed as %s", id, v.Queues, placed)
		}
		_, err := dial(id).DeclareQueue(ctx, client.Queue("events").Durable())
		if !errors.Is(err, client.ErrConflict) {
			t.Fatalf("re-declare events durable through %s: %v, want a conflict", id, err)
		}
	}
	if _, err := dial(survivors[1]).DeclareQueue(ctx, client.Queue("audit").Durable()); err != nil {
		t.Fatalf("declare through %s under the new leader: %v", survivors[1], err)
	}
	cp.start(t, ctx, leader)
	waitView(t, ctx, cp.procs[leader].Admin, &v, func() bool { return len(v.Queues) == 2 && v.Leader != "" })
	if _, err := dial(leader).DeclareQueue(ctx, client.Queue("audit").Buffered()); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("re-declare audit buffered through the restarted %s: %v, want a conflict", leader, err)
	}
}
