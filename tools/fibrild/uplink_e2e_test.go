package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/internal/tcpproxy"
)

// TestUplinkSurvivesCutsAndAnEdgeKill: an edge fibrild forwards a queue
// to another fibrild through a link the test cuts, and is SIGKILLed
// mid-forward and started again. Every message the edge confirmed arrives
// upstream exactly once, the edge ends empty, and GET /api/uplinks reports
// the uplink connected.
func TestUplinkSurvivesCutsAndAnEdgeKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the fibrild binary")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitLimit)
	defer cancel()
	bin := buildDaemon(t)
	hq := startSolo(t)
	link, edgeArgs := edgeToHQ(t, hq, "sensors", 64)
	edge := startDaemon(t, bin, edgeArgs...)

	c := dialClient(t, ctx, edge)
	if _, err := c.DeclareQueue(ctx, client.Queue("sensors").Buffered().Partitions(2)); err != nil {
		t.Fatal(err)
	}
	const n = 4000
	fs := make([]*client.Future, n)
	for i := range n {
		fs[i] = c.PublishAsyncContext(ctx, "sensors", client.Message{Body: fmt.Appendf(nil, "m%d", i)})
	}
	for i, f := range fs {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	c.Close()

	await.Until(t, ctx, "forwarding under way", func() bool { return holdsOr0(t, hq.Admin, "sensors") >= 500 })
	link.Cut()
	link.Restore()
	await.Until(t, ctx, "more forwarded after the cut", func() bool { return holdsOr0(t, hq.Admin, "sensors") >= 1500 })
	edge.Kill() // SIGKILL mid-forward: confirms in flight are lost, acks unwritten
	if got := holdsOr0(t, hq.Admin, "sensors"); got >= n {
		t.Fatalf("everything was forwarded before the kill (%d); the test needs messages in flight", got)
	}
	edge = startDaemon(t, bin, edgeArgs...)
	await.Until(t, ctx, "the edge empty and everything upstream", func() bool {
		m, _ := queueHolds(t, edge.Admin, "sensors")
		return m == 0 && holdsOr0(t, hq.Admin, "sensors") >= n
	})
	if got := holdsOr0(t, hq.Admin, "sensors"); got != n {
		t.Fatalf("upstream holds %d messages, want exactly %d (a resend after the kill was not recognised)", got, n)
	}
	var st struct {
		Uplinks []struct {
			Name   string
			State  string
			Queues []struct {
				Local     string
				Forwarded uint64
			}
		} `json:"uplinks"`
	}
	resp, err := http.Get(edge.Admin + "/api/uplinks")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if len(st.Uplinks) != 1 || st.Uplinks[0].Name != "to-hq" || st.Uplinks[0].State != "connected" ||
		len(st.Uplinks[0].Queues) != 1 || st.Uplinks[0].Queues[0].Forwarded == 0 {
		t.Fatalf("GET /api/uplinks after the restart: %+v", st)
	}
	// The same figures in /metrics, labelled by uplink and queue.
	mresp, err := http.Get(edge.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`fibril_uplink_state{state="connected",uplink="to-hq"} 1`,
		`fibril_uplink_queue_state{queue="sensors",state="connected",uplink="to-hq"} 1`,
		`fibril_uplink_backlog_messages{queue="sensors",uplink="to-hq"} 0`,
		fmt.Sprintf(`fibril_uplink_forwarded_total{queue="sensors",uplink="to-hq"} %d`, st.Uplinks[0].Queues[0].Forwarded),
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// holdsOr0 is queueHolds' message count, 0 while the queue does not exist.
func holdsOr0(t *testing.T, admin, queue string) int64 {
	t.Helper()
	resp, err := http.Get(admin + "/api/queues/" + queue)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var q struct {
		Messages int64 `json:"messages"`
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return 0
	case resp.StatusCode != http.StatusOK:
		t.Fatalf("GET /api/queues/%s: status %d", queue, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&q); err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

// Issue test 2 of federating edges, at reduced size: a long outage leaves
// 100,000 messages on the edge. While the link is down the edge keeps all
// of them and its memory stays flat; once the link is back the backlog
// replays pipelined (the rate is logged), nothing leaves the edge before
// the remote confirmed it (at every look, the edge and the remote hold
// every message between them), and the remote ends with each one once.
func TestUplinkReplaysALongOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the fibrild binary")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitLimit)
	defer cancel()
	bin := buildDaemon(t)
	hq := startSolo(t)
	link, edgeArgs := edgeToHQ(t, hq, "backlog", 1024)
	link.Cut()
	edge := startDaemon(t, bin, edgeArgs...)
	c := dialClient(t, ctx, edge)
	if _, err := c.DeclareQueue(ctx, client.Queue("backlog").Durable().Partitions(2)); err != nil {
		t.Fatal(err)
	}
	before, err := edge.Usage()
	if err != nil {
		t.Fatal(err)
	}
	const n = 100_000
	body := make([]byte, 100)
	fs := make([]*client.Future, 0, 1024)
	for i := range n {
		fs = append(fs, c.PublishAsyncContext(ctx, "backlog", client.Message{Body: body}))
		if len(fs) == cap(fs) || i == n-1 {
			for _, f := range fs {
				if _, err := f.Wait(ctx); err != nil {
					t.Fatalf("publish: %v", err)
				}
			}
			fs = fs[:0]
		}
	}
	if got := holdsOr0(t, edge.Admin, "backlog"); got != n {
		t.Fatalf("with the link down the edge holds %d of %d messages", got, n)
	}
	during, err := edge.Usage()
	if err != nil {
		t.Fatal(err)
	}
	link.Restore()
	start := time.Now()
	await.Until(t, ctx, "the backlog forwarded", func() bool {
		local, remote := holdsOr0(t, edge.Admin, "backlog"), holdsOr0(t, hq.Admin, "backlog")
		if local+remote < n {
			t.Fatalf("the edge holds %d and the remote %d: %d messages left the edge before the remote had them", local, remote, n-local-remote)
		}
		return local == 0
	})
	took := time.Since(start)
	after, err := edge.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if got := holdsOr0(t, hq.Admin, "backlog"); got != n {
		t.Fatalf("the remote holds %d messages, want exactly %d", got, n)
	}
	t.Logf("replayed %d messages of %d bytes in %v (%.0f/s); edge RSS %d MiB at start, %d MiB with the backlog held, peak %d MiB",
		n, len(body), took.Round(time.Millisecond), float64(n)/took.Seconds(), before.RSS>>20, during.RSS>>20, after.PeakRSS>>20)
	// The backlog lives on disk: holding 100,000 messages may cost their
	// per-message state (tens of bytes each), not their bodies.
	if grew := during.RSS - before.RSS; grew > 64<<20 {
		t.Fatalf("holding the backlog grew the edge's RSS by %d MiB", grew>>20)
	}
}

// edgeToHQ puts a TCP proxy (closed at the end of the test) in front of
// hq and returns it with the flags of an edge fibrild whose uplink
// forwards queue through it, window publishes in flight.
func edgeToHQ(t *testing.T, hq *daemonProcess, queue string, window int) (*tcpproxy.Proxy, []string) {
	t.Helper()
	link, err := tcpproxy.Start(hq.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { link.Close() })
	cfg := filepath.Join(t.TempDir(), "edge.toml")
	toml := fmt.Sprintf("[[uplink]]\nname = \"to-hq\"\nqueues = [%q]\nto = [%q]\nwindow = %d\nsource = \"site7\"\n", queue, link.Addr(), window)
	if err := os.WriteFile(cfg, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	return link, []string{"--config", cfg, "--storage.data_dir", t.TempDir(), "--server.listen", "127.0.0.1:0",
		"--admin.listen", "127.0.0.1:0", "--storage.min_free", "0"}
}
