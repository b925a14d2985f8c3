package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/fibril-edge/fibril/appliance"
)

// TestNode: GET /api/node reports the version, the data directory's disk
// as measured on the real file system, the process and the queue counts;
// with tokens configured it needs one.
func TestNode(t *testing.T) {
	dir := t.TempDir()
	f := newFixtureWith(t, appliance.Options{DataDir: dir, FS: vfs.Default,
		DiskBudgetBytes: 1 << 40, MinFreeBytes: 1 << 10}, Options{Version: "v1.2.3-test", Tokens: []string{"s3cret"}})
	f.do("GET", "/api/node", nil).wantError(t, http.StatusUnauthorized, "unauthorized")
	f.token = "s3cret"
	f.declare(map[string]any{"name": "clicks", "durability": "buffered"})

	r := f.do("GET", "/api/node", nil)
	keys := func(raw []byte) map[string]json.RawMessage {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("decode %s: %v", raw, err)
		}
		return m
	}
	top := keys(r.body)
	for obj, want := range map[string][]string{
		"":        {"version", "started_at", "uptime_s", "data_dir", "disk", "process", "queues", "failed_queues"},
		"disk":    {"free_bytes", "total_bytes", "used_by_data_bytes", "budget_bytes", "min_free_bytes", "refusing"},
		"process": {"pid", "goroutines", "heap_bytes", "cpu_seconds"},
	} {
		m := top
		if obj != "" {
			m = keys(top[obj])
		}
		for _, k := range want {
			if _, ok := m[k]; !ok {
				t.Errorf("%q lacks %s: %s", obj, k, r.body)
			}
		}
	}

	var n nodeView
	r.want(t, http.StatusOK, &n)
	if n.Version != "v1.2.3-test" || n.DataDir != dir || n.Queues != 1 || n.FailedQueues != 0 {
		t.Fatalf("node %s: want version v1.2.3-test, data_dir %s, 1 queue, none failed", r.body, dir)
	}
	if n.UptimeS < 0 || n.StartedAt.After(time.Now()) || n.StartedAt.IsZero() {
		t.Fatalf("started_at %v, uptime %d s", n.StartedAt, n.UptimeS)
	}
	d := n.Disk
	if d.Error != "" || d.FreeBytes == nil || d.TotalBytes == nil || d.UsedByDataBytes == nil {
		t.Fatalf("disk %s: want every figure measured", r.body)
	}
	if *d.FreeBytes <= 0 || *d.TotalBytes < *d.FreeBytes || *d.UsedByDataBytes <= 0 || *d.UsedByDataBytes > *d.TotalBytes {
		t.Fatalf("disk figures out of order: %s", r.body)
	}
	if d.BudgetBytes != 1<<40 || d.MinFreeBytes != 1<<10 || d.Refusing || d.Refusal != "" {
		t.Fatalf("disk limits %s: want budget 1 TiB, watermark 1 KiB, accepting", r.body)
	}
	p := n.Process
	if p.PID != os.Getpid() || p.Goroutines <= 0 || p.HeapBytes <= 0 || p.CPUSeconds == nil || *p.CPUSeconds < 0 {
		t.Fatalf("process %s", r.body)
	}
	if (p.RSSBytes != nil) != (runtime.GOOS == "linux") || (p.RSSBytes != nil && *p.RSSBytes <= 0) {
		t.Fatalf("rss_bytes %s on %s: want a positive figure on Linux only", r.body, runtime.GOOS)
	}
}

// TestNodeDiskRefusing: past the budget, /api/node says publishes are
// refused and why; on a file system without statfs the free figures are
// null with the error, and the request still succeeds.
func TestNodeDiskRefusing(t *testing.T) {
	f := newFixtureWith(t, appliance.Options{DataDir: "data", FS: vfs.NewMem(), DiskBudgetBytes: 1, MinFreeBytes: -1}, Options{})
	var n nodeView
	r := f.do("GET", "/api/node", nil).want(t, http.StatusOK, &n)
	d := n.Disk
	if !d.Refusing || d.Refusal == "" || d.BudgetBytes != 1 || d.MinFreeBytes != 0 {
		t.Fatalf("disk %s: want refusing past a 1-byte budget", r.body)
	}
	if d.FreeBytes != nil || d.TotalBytes != nil || d.Error == "" || d.UsedByDataBytes == nil {
		t.Fatalf("disk %s: want null free figures with an error, the data size measured", r.body)
	}
	if n.Version == "" {
		t.Fatalf("no default version: %s", r.body)
	}
}

// fibril_build_info names the version GET /api/node reports and the Go
// release.
func TestBuildInfoMetric(t *testing.T) {
	f := newFixtureWith(t, appliance.Options{DataDir: t.TempDir(), FS: vfs.Default, MinFreeBytes: -1}, Options{Version: "v1.2.3-test"})
	r := f.do("GET", "/metrics", nil).want(t, http.StatusOK, nil)
	want := fmt.Sprintf(`fibril_build_info{goversion=%q,version="v1.2.3-test"} 1`, runtime.Version())
	if !strings.Contains(string(r.body), want+"\n") {
		t.Fatalf("no %s in /metrics", want)
	}
}
