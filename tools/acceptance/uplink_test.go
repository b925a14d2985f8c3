package acceptance

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/internal/tcpproxy"
)

// Issue test 1 of federating edges: an edge fibrild on its own loop XFS
// image forwards a durable queue (at most 2,000 messages a second, so the
// faults land mid-forward) into a three-node cluster (every node in
// the uplink's list, each behind a TCP proxy the test cuts). The link is
// cut and restored mid-forward, then the edge's image loses power
// mid-forward and the edge starts again, and more is published. Every
// message the edge confirmed arrives upstream exactly once (the remote's
// dedupe window drops the resends), each local partition in order, and
// the edge ends empty.
func TestUplinkIntoClusterThroughCutsAndAPowerCut(t *testing.T) {
	ctx := caseCtx(t, 4*time.Minute)
	e := newClusterEnv(t, ctx, "xfs")
	var proxies []*tcpproxy.Proxy
	var to []string
	for _, b := range e.nodes {
		p, err := tcpproxy.Start(b.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		proxies, to = append(proxies, p), append(to, strconv.Quote(p.Addr()))
	}
	cut := func(down bool) {
		for _, p := range proxies {
			if down {
				p.Cut()
			} else {
				p.Restore()
			}
		}
	}
	loop, err := NewLoopFS(ctx, LoopOptions{FS: "xfs", Dir: filepath.Join(t.TempDir(), "edge")})
	if err != nil {
		t.Fatalf("THIS CASE NEEDS A LOOP-MOUNTED XFS FILE SYSTEM AND CANNOT HAVE ONE: %v", err)
	}
	t.Cleanup(func() {
		if err := loop.Close(); err != nil {
			t.Errorf("the edge's loop fs: %v", err)
		}
	})
	cfg := filepath.Join(t.TempDir(), "edge.toml")
	toml := fmt.Sprintf("[[uplink]]\nname = \"to-hq\"\nqueues = [\"site\"]\nto = [%s]\nwindow = 256\nrate = 2000\nsource = \"edge1\"\n",
		strings.Join(to, ", "))
	if err := os.WriteFile(cfg, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	edge := &Broker{Bin: e.nodes[0].Bin, DataDir: filepath.Join(loop.Mnt, "data"),
		Args: []string{"--config", cfg, "--storage.segment_size", "1MiB"}}
	t.Cleanup(edge.Kill) // before the loop file system's Close
	if err := edge.Start(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(ctx, edge.Addr(), client.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeclareQueue(ctx, client.Queue("site").Durable().Partitions(2)); err != nil {
		t.Fatal(err)
	}
	confirmed := map[string]bool{}
	publish := func(from, to int) {
		fs := make([]*client.Future, 0, to-from)
		for i := from; i < to; i++ {
			fs = append(fs, c.PublishAsyncContext(ctx, "site", client.Message{Key: strconv.Itoa(i % 7), Body: fmt.Appendf(nil, "m%d", i)}))
		}
		for i, f := range fs {
			if _, err := f.Wait(ctx); err != nil {
				t.Fatalf("publish m%d to the edge: %v", from+i, err)
			}
			confirmed[fmt.Sprintf("m%d", from+i)] = true
		}
	}
	publish(0, 4000)
	c.Close()
	upstreamAtLeast(t, ctx, e, 600)
	cut(true)
	e.schedule("link cut")
	cut(false)
	e.schedule("link restored")
	upstreamAtLeast(t, ctx, e, 1500)
	if err := loop.PowerCut(ctx); err != nil {
		t.Fatal(err)
	}
	edge.Kill()
	held := upstreamHolds(ctx, e)
	e.schedule("edge power cut with %d of 4000 upstream", held)
	if held >= 4000 {
		t.Fatalf("everything was forwarded before the power cut; the case needs messages in flight")
	}
	if err := loop.Unmount(ctx); err != nil {
		t.Fatal(err)
	}
	if err := loop.Mount(ctx); err != nil {
		t.Fatal(err)
	}
	if err := edge.Start(ctx); err != nil {
		t.Fatalf("restart the edge: %v", err)
	}
	e.schedule("edge restarted")
	if c, err = client.Dial(ctx, edge.Addr(), client.Options{Logger: quiet()}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	publish(4000, 6000)
	for {
		info, err := edge.QueueInfo(ctx, "site")
		if err == nil && info.Messages == 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the edge never emptied: %+v (%v)\nschedule:\n%s", info, err, strings.Join(e.sched, "\n"))
		case <-time.After(50 * time.Millisecond): // polling another process's admin API
		}
	}
	// The edge is empty: it has every confirm. The remote holds each
	// message once, resends dropped by its dedupe window.
	if held = upstreamHolds(ctx, e); held != int64(len(confirmed)) {
		t.Fatalf("upstream holds %d messages, want exactly the %d the edge confirmed\nschedule:\n%s", held, len(confirmed), strings.Join(e.sched, "\n"))
	}
	got := drainUpstream(t, ctx, e.addrs, "site", len(confirmed))
	for body := range confirmed {
		if !got[body] {
			t.Fatalf("%s was confirmed by the edge and never arrived upstream\nschedule:\n%s", body, strings.Join(e.sched, "\n"))
		}
	}
	e.schedule("upstream holds each of the %d confirmed messages once, in order per local partition", len(confirmed))
}

// upstreamAtLeast waits until the cluster's queue "site" holds n
// messages, read through its owner.
func upstreamAtLeast(t *testing.T, ctx context.Context, e *clusterEnv, n int64) {
	t.Helper()
	for upstreamHolds(ctx, e) < n {
		select {
		case <-ctx.Done():
			t.Fatalf("upstream never held %d messages\nschedule:\n%s", n, strings.Join(e.sched, "\n"))
		case <-time.After(50 * time.Millisecond): // polling other processes' admin APIs
		}
	}
}

// upstreamHolds is how many messages the cluster's queue "site" holds,
// read through its owner; -1 while that cannot be read.
func upstreamHolds(ctx context.Context, e *clusterEnv) int64 {
	v, err := e.view(ctx)
	if err != nil {
		return -1
	}
	for _, q := range v.Queues {
		if q.Name != "site" || len(q.Partitions) == 0 {
			continue
		}
		for i, id := range e.ids {
			if id == q.Partitions[0].Owner {
				if info, err := e.nodes[i].QueueInfo(ctx, "site"); err == nil {
					return info.Messages
				}
			}
		}
	}
	return -1
}

// drainUpstream consumes queue through addrs until it has n distinct
// bodies and the queue is empty, failing on a body delivered twice and on
// a local partition's messages (named by the uplink's id) out of order.
func drainUpstream(t *testing.T, ctx context.Context, addrs, queue string, n int) map[string]bool {
	t.Helper()
	c, err := client.Dial(ctx, addrs, client.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cons, err := c.Consume(ctx, queue, 256)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	bodies := make(map[string]bool, n)
	last := map[string]uint64{}
	for len(bodies) < n {
		select {
		case d := <-cons.Messages():
			if bodies[string(d.Body)] {
				t.Fatalf("%s delivered upstream twice (id %s)", d.Body, d.ID)
			}
			bodies[string(d.Body)] = true
			cut := strings.LastIndexByte(d.ID, '/')
			off, err := strconv.ParseUint(d.ID[cut+1:], 10, 64)
			if err != nil {
				t.Fatalf("forwarded id %q: %v", d.ID, err)
			}
			if prev, ok := last[d.ID[:cut]]; ok && off <= prev {
				t.Fatalf("local partition %s out of order upstream: offset %d after %d", d.ID[:cut], off, prev)
			}
			last[d.ID[:cut]] = off
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatalf("upstream delivered %d of %d", len(bodies), n)
		}
	}
	return bodies
}
