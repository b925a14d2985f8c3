package acceptance

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/internal/fibrildproc"
)

// Case 5, storage failure: a fibrild built with -tags faultinject fails
// every write or every fdatasync of one queue's segment files on request
// (tools/internal/daemon/fault_inject.go). The queue's log must latch: the
// publish that met the failure and every later one are refused with a
// clear error, also after the fault is gone (a failed sync is never
// retried and believed); /readyz and the systemd watchdog report it; the
// other queue keeps serving; and a restart cuts the log back to its last
// good sync and serves again. Durable: exactly the confirmed messages
// come back. Buffered: the messages confirmed before the last completed
// sync come back, the ones confirmed after it are lost, as the mode
// allows.

// faultReq is the body of POST /debug/fault.
type faultReq struct {
	Queue    string `json:"queue,omitempty"`
	Op       string `json:"op"`
	Injected int64  `json:"injected,omitempty"`
}

func TestStorageFailure(t *testing.T) {
	requireAcceptanceGate(t)
	bin := buildFibrildTags(t, "faultinject")
	for _, tc := range []struct {
		name     string
		buffered bool
		op       string // "write" or "sync"
	}{
		{"durable-write-error", false, "write"},
		{"durable-sync-error", false, "sync"},
		{"buffered-background-sync-error", true, "sync"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storageFailureCase(t, bin, tc.buffered, tc.op)
		})
	}
}

// A release build (no tags, as make build and make package build it)
// carries no fault hook: no endpoint, no injector in its symbols. The
// tagged build has both, which shows that the check can fail.
func TestReleaseBuildHasNoFaultHook(t *testing.T) {
	requireAcceptanceGate(t)
	ctx := caseCtx(t, 2*time.Minute)
	for _, tc := range []struct {
		tags []string
		want bool
	}{{nil, false}, {[]string{"faultinject"}, true}} {
		bin := filepath.Join(t.TempDir(), "fibrild")
		if err := fibrildproc.BuildWith(ctx, "../fibrild", bin, fibrildproc.BuildOptions{
			Tags: tc.tags, LDFlags: "-X main.version=acceptance"}); err != nil {
			t.Fatal(err)
		}
		out, err := runOutput(ctx, "go", "tool", "nm", bin)
		if err != nil {
			t.Fatal(err)
		}
		if has := strings.Contains(out, "daemon.faultInjector"); has != tc.want {
			t.Fatalf("tags %v: fault injector in the symbols: %v, want %v", tc.tags, has, tc.want)
		}
		p, err := fibrildproc.Start(ctx, fibrildproc.Options{Bin: bin, DataDir: filepath.Join(t.TempDir(), "data"),
			Args: []string{"--storage.min_free", "0"}})
		if err != nil {
			t.Fatal(err)
		}
		status, err := adminJSON(ctx, p.Admin, http.MethodPost, "/debug/fault", faultReq{Op: "off"}, nil)
		p.Kill()
		if err != nil {
			t.Fatal(err)
		}
		if served := status == http.StatusOK; served != tc.want {
			t.Fatalf("tags %v: POST /debug/fault answered %d", tc.tags, status)
		}
	}
}

func storageFailureCase(t *testing.T, bin string, buffered bool, op string) {
	ctx := caseCtx(t, 2*time.Minute)
	const (
		faulty, healthy = "faulty", "healthy"
		size            = 512
		before          = 200 // confirmed before the fault is armed
	)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	watchdog := listenNotify(t, filepath.Join(dir, "notify.sock"))
	start := func(listen string) *fibrildproc.Process {
		p, err := fibrildproc.Start(ctx, fibrildproc.Options{Bin: bin, DataDir: data, Listen: listen,
			Args: []string{"--storage.min_free", "0"},
			Env:  []string{"NOTIFY_SOCKET=" + watchdog.path, "WATCHDOG_USEC=200000"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Kill)
		return p
	}
	p := start("")
	c := quietClient(t, ctx, p.Addr)
	q := client.Queue(faulty).Durable()
	if buffered {
		q = client.Queue(faulty).Buffered()
	}
	declare(t, ctx, c, q)
	declare(t, ctx, c, client.Queue(healthy).Durable())

	var out outcomes
	publishSeq(ctx, c, faulty, "a", 0, before, size, false, &out)
	if len(out.refused) > 0 {
		t.Fatalf("refused before any fault: %v", out.refused)
	}
	watchdog.await(t, ctx, "WATCHDOG=1")
	// Every record so far synced: for a buffered queue that is the last
	// good sync the restart must come back to.
	await.Until(t, ctx, "faulty queue synced", func() bool {
		qi, err := GetQueueInfo(ctx, p.Admin, faulty)
		return err == nil && qi.Partitions[0].DurableNext == qi.Partitions[0].WrittenNext && qi.Partitions[0].DurableNext > 0
	})
	syncedBefore := len(out.confirmed)

	var armed faultReq
	if status, err := adminJSON(ctx, p.Admin, http.MethodPost, "/debug/fault", faultReq{Queue: faulty, Op: op}, &armed); err != nil || status != http.StatusOK {
		t.Fatalf("arm %s fault: %d %v", op, status, err)
	}
	armedAt := time.Now()
	// Publish until the log refuses. Durable: the first publish meets the
	// failure. Buffered: publishes are confirmed at written until the
	// background sync (100 ms) fails and latches the log.
	var refusal error
	for i := before; refusal == nil && time.Since(armedAt) < 30*time.Second; i++ {
		publishSeq(ctx, c, faulty, "a", i, 1, size, true, &out)
		refusal = out.refused[idOf("a", i)]
	}
	if refusal == nil {
		t.Fatalf("%s fault armed 30s ago: publishes still confirmed", op)
	}
	if buffered && len(out.confirmed) == syncedBefore {
		t.Logf("no publish was confirmed between the arming and the latch")
	}
	if !errors.Is(refusal, client.ErrUnavailable) || !strings.Contains(refusal.Error(), "latched after a storage failure") ||
		!strings.Contains(refusal.Error(), "wal: "+op) {
		t.Fatalf("refusal is not the clear latch error: %v", refusal)
	}
	t.Logf("refused with: %v", refusal)
	var st faultReq
	if _, err := adminJSON(ctx, p.Admin, http.MethodGet, "/debug/fault", nil, &st); err != nil || st.Injected == 0 {
		t.Fatalf("fault state %+v %v: nothing injected", st, err)
	}
	// The fault is gone, the latch is not: a failed sync is never retried.
	if _, err := adminJSON(ctx, p.Admin, http.MethodPost, "/debug/fault", faultReq{Op: "off"}, nil); err != nil {
		t.Fatal(err)
	}
	publishSeq(ctx, c, faulty, "after-fault", 0, 3, size, false, &out)
	if len(out.refused) < 4 {
		t.Fatalf("publishes after the fault was disarmed were confirmed: the latch did not hold (%d refused)", len(out.refused))
	}
	qi, err := GetQueueInfo(ctx, p.Admin, faulty)
	if err != nil || !qi.Partitions[0].Latched || !strings.Contains(qi.Partitions[0].LastError, "injected") {
		t.Fatalf("queue info after the fault: %+v %v", qi, err)
	}
	status, body, err := readyz(ctx, p.Admin)
	if err != nil || status != http.StatusServiceUnavailable || !strings.Contains(body, faulty+"/0") {
		t.Fatalf("/readyz with a latched log: %d %s %v", status, body, err)
	}
	await.Until(t, ctx, "the watchdog stops", func() bool {
		return strings.Contains(p.Log(), "storage unhealthy: systemd watchdog pings stopped")
	})
	if n := watchdog.countFor(t, "WATCHDOG=1", time.Second); n > 1 {
		t.Fatalf("%d watchdog pings in the second after the latch (every 100 ms while healthy)", n)
	}
	var other outcomes
	publishSeq(ctx, c, healthy, "h", 0, 20, size, false, &other)
	if len(other.refused) > 0 {
		t.Fatalf("the healthy queue refused publishes: %v", other.refused)
	}

	// Restart: the log is cut back to its last good sync and serves again.
	c.Close()
	if err := p.Stop(30 * time.Second); err != nil {
		t.Logf("shutdown with a latched log: %v; last lines:\n%s", err, lastLines(p.Log(), 6))
	}
	p = start(p.Addr)
	if status, body, err := readyz(ctx, p.Admin); err != nil || status != http.StatusOK {
		t.Fatalf("/readyz after the restart: %d %s %v", status, body, err)
	}
	c = quietClient(t, ctx, p.Addr)
	qi, err = GetQueueInfo(ctx, p.Admin, faulty)
	if err != nil || qi.Partitions[0].Latched {
		t.Fatalf("queue info after the restart: %+v %v", qi, err)
	}
	want := out.confirmed
	if buffered {
		want = out.confirmed[:syncedBefore]
	}
	read := readBack(t, ctx, c, faulty, qi.Messages, size)
	lost, unexpected, dups := sameIDs(read, want)
	if len(lost) > 0 || len(unexpected) > 0 || dups > 0 {
		t.Fatalf("after the restart: %d lost %v, %d unexpected %v, %d duplicates", len(lost), head(lost), len(unexpected), head(unexpected), dups)
	}
	if !inOrder(read[0], want) {
		t.Fatalf("read back out of publish order")
	}
	lostConfirms := len(out.confirmed) - len(want)
	t.Logf("mode %s, %s fault: %d confirmed, %d refused, %d confirmed lost (allowed: buffered confirms after the last good sync), read back %d",
		qi.Durability, op, len(out.confirmed), len(out.refused), lostConfirms, qi.Messages)
	if !buffered && lostConfirms != 0 {
		t.Fatalf("durable queue lost %d confirmed messages", lostConfirms)
	}
	var again outcomes
	read = readBack(t, ctx, c, healthy, 20, size)
	if lost, unexpected, dups := sameIDs(read, other.confirmed); len(lost)+len(unexpected)+dups > 0 {
		t.Fatalf("healthy queue after the restart: lost %v, unexpected %v, %d duplicates", lost, unexpected, dups)
	}
	publishSeq(ctx, c, faulty, "b", 0, 50, size, false, &again)
	if len(again.refused) > 0 {
		t.Fatalf("%d publishes after the restart refused: %v", len(again.refused), again.refused[idOf("b", 0)])
	}
	read = readBack(t, ctx, c, faulty, 50, size)
	if len(read[0]) != 50 || read[0][0] != idOf("b", 0) || read[0][49] != idOf("b", 49) {
		t.Fatalf("after the restart the new messages read back as %v", head(read[0]))
	}
	watchdog.await(t, ctx, "WATCHDOG=1")
}

// idOf is publishSeq's id of message i.
func idOf(prefix string, i int) string { return fmt.Sprintf("%s-%06d", prefix, i) }

// inOrder reports whether got is want (one partition, publish order).
func inOrder(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// head is the first few of ids, for failure messages.
func head(ids []string) []string {
	if len(ids) > 10 {
		return ids[:10]
	}
	return ids
}

// notifySocket is a stand-in for systemd's notification socket.
type notifySocket struct {
	path string
	msgs chan string
}

// listenNotify listens on a unixgram socket at path and collects what
// arrives.
func listenNotify(t *testing.T, path string) *notifySocket {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	s := &notifySocket{path: path, msgs: make(chan string, 4096)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			select {
			case s.msgs <- string(buf[:n]):
			default: // nobody reads: drop
			}
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return s
}

// await waits for the message want, dropping others.
func (s *notifySocket) await(t *testing.T, ctx context.Context, want string) {
	t.Helper()
	for {
		select {
		case m := <-s.msgs:
			if m == want {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no %s from the daemon: %v", want, ctx.Err())
		}
	}
}

// countFor drops what has arrived, then counts the messages want that
// arrive within d.
func (s *notifySocket) countFor(t *testing.T, want string, d time.Duration) int {
	t.Helper()
	for drained := false; !drained; {
		select {
		case <-s.msgs:
		default:
			drained = true
		}
	}
	n := 0
	window := time.NewTimer(d)
	defer window.Stop()
	for {
		select {
		case m := <-s.msgs:
			if m == want {
				n++
			}
		case <-window.C:
			return n
		}
	}
}

// runOutput runs a command and returns its standard output.
func runOutput(ctx context.Context, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, name, args...).Output()
	if err != nil {
		return "", fmt.Errorf("%s %v: %w", name, args, err)
	}
	return string(out), nil
}

// lastLines is the last n lines of log.
func lastLines(log string, n int) string {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// The same faults under concurrent load: two publishers with 64 publishes
// in flight each and an acking consumer on a queue of two partitions,
// beside a healthy queue under the same load. The checker judges the
// whole history after the restart: nothing confirmed to the durable queue
// lost, and on the buffered queue only confirms no completed sync covered.
func TestStorageFailureUnderLoad(t *testing.T) {
	requireAcceptanceGate(t)
	bin := buildFibrildTags(t, "faultinject")
	for _, tc := range []struct {
		name     string
		buffered bool
		op       string
	}{
		{"durable-write-error", false, "write"},
		{"durable-sync-error", false, "sync"},
		{"buffered-background-sync-error", true, "sync"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := caseCtx(t, 2*time.Minute)
			dir := t.TempDir()
			b := &Broker{Bin: bin, DataDir: filepath.Join(dir, "data"), Args: []string{"--log.level", "info"}}
			if err := b.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(b.Kill)
			h, err := CreateHistory(filepath.Join(dir, "history.jsonl"), 0)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			queues := []QueueSpec{{Name: "faulty", Buffered: tc.buffered, Partitions: 2}, {Name: "healthy", Partitions: 2}}
			seed := caseSeed(t)
			h.Note("case 5 under load: %s fault, seed %d", tc.op, seed)
			r, err := StartLoad(ctx, LoadOptions{Addr: b.Addr(), Admin: b.Admin, History: h, Queues: queues, Seed: seed, Prefix: "sf"})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Stop()
			if err := r.WaitConfirmed(ctx, 1000); err != nil {
				t.Fatal(err)
			}
			if err := r.RecordFrontiers(ctx); err != nil {
				t.Fatal(err)
			}
			if status, err := adminJSON(ctx, b.Admin(), http.MethodPost, "/debug/fault", faultReq{Queue: "faulty", Op: tc.op}, nil); err != nil || status != http.StatusOK {
				t.Fatalf("arm %s fault: %d %v", tc.op, status, err)
			}
			h.Fault(tc.op + " fault on queue faulty")
			await.Until(t, ctx, "publishes to the faulty queue refused", func() bool { return r.Counts().Failed >= 100 })
			if _, err := adminJSON(ctx, b.Admin(), http.MethodPost, "/debug/fault", faultReq{Op: "off"}, nil); err != nil {
				t.Fatal(err)
			}
			// The healthy queue goes on: more confirms while the faulty
			// one refuses.
			if err := r.WaitConfirmed(ctx, r.Counts().Confirmed+500); err != nil {
				t.Fatal(err)
			}
			r.Stop()
			if err := b.Stop(30 * time.Second); err == nil {
				t.Fatalf("clean exit with a latched log")
			}
			h.Restart()
			if err := b.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := Drain(ctx, h, b.Addr(), b.Admin(), queues); err != nil {
				t.Fatal(err)
			}
			events, err := ReadHistory(h.Path())
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range events {
				if e.Kind == KindFail && !strings.Contains(e.Err, "latched after a storage failure") {
					t.Fatalf("publish %s to %s failed with another error than the latch: %s", e.ID, e.Queue, e.Err)
				}
			}
			rep := Verify(events, queues)
			t.Logf("%s", rep)
			if f := rep.Failures(); len(f) > 0 {
				t.Fatalf("%d failures, first: %v", len(f), head(f))
			}
			if oldest, ok := rep.OldestLoss("faulty"); ok {
				t.Logf("oldest lost confirm: %v", oldest)
			}
		})
	}
}
