package admin

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

var update = flag.Bool("update", false, "rewrite testdata/metrics.golden")

// TestMetricsGolden scrapes /metrics after some traffic and compares the
// sorted fibril_ metric families, with their types, to the golden file.
// Run with -update to rewrite it after adding a metric.
func TestMetricsGolden(t *testing.T) {
	f := newFixture(t, Options{ServerConnections: func() int { return 2 }, Bridges: siteBridge,
		ServerStats: func() ServerStats { return ServerStats{PreHello: 3, PreHelloEvicted: 1} }})
	f.declare(map[string]any{"name": "clicks", "durability": "buffered"})
	f.declare(map[string]any{"name": "orders", "durability": "durable", "max_messages": 2})
	for _, q := range []string{"clicks", "orders", "orders"} {
		f.do("POST", "/api/queues/"+q+"/messages", map[string]any{"body": "x"}).want(t, http.StatusOK, nil)
	}
	f.do("POST", "/api/queues/orders/messages", map[string]any{"body": "x"}).wantError(t, http.StatusTooManyRequests, "queue_full")
	f.do("POST", "/api/queues/orders/get", map[string]any{"max": 2, "ack": "ack", "wait_ms": 5000}).want(t, http.StatusOK, nil)

	// The observer sees a delivery after handing it over: wait for it.
	waitFor(t, "deliveries observed", func() bool {
		return f.srv.opts.Metrics.counts("orders", appliance.Durable).deliveries.Load() == 2
	})
	r := f.do("GET", "/metrics", nil).want(t, http.StatusOK, nil)
	var families []string
	sc := bufio.NewScanner(bytes.NewReader(r.body))
	for sc.Scan() {
		if name, ok := strings.CutPrefix(sc.Text(), "# TYPE "); ok && strings.HasPrefix(name, "fibril_") {
			families = append(families, name)
		}
	}
	slices.Sort(families)
	got := strings.Join(families, "\n") + "\n"
	golden := filepath.Join("testdata", "metrics.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("metric families differ from %s (run with -update if intended):\ngot:\n%s\nwant:\n%s", golden, got, want)
	}

	// A few values, to show the families carry the traffic.
	for _, line := range []string{
		`fibril_confirms_total{mode="buffered",queue="clicks"} 1`,
		`fibril_confirms_total{mode="durable",queue="orders"} 2`,
		`fibril_publishes_total{mode="durable",queue="orders"} 3`,
		`fibril_deliveries_total{mode="durable",queue="orders"} 2`,
		`fibril_publish_refusals_total{mode="durable",queue="orders",reason="queue_full"} 1`,
		`fibril_partition_written_next{mode="buffered",partition="0",queue="clicks"} 1`,
		`fibril_confirm_latency_seconds_count{mode="durable"} 2`,
		`fibril_publish_to_deliver_seconds_count{mode="durable"} 2`,
		`fibril_connections 2`,
		`fibril_latched_logs 0`,
		`fibril_queues 2`,
	} {
		if !bytes.Contains(r.body, []byte(line+"\n")) {
			t.Errorf("scrape lacks %s", line)
		}
	}
	// The durable publishes were synced: at least one fdatasync reported
	// the appends it completed, and every durable confirm is among them.
	var syncs, appends float64
	for _, line := range strings.Split(string(r.body), "\n") {
		if v, ok := strings.CutPrefix(line, "fibril_fsync_appends_count "); ok {
			fmt.Sscan(v, &syncs)
		}
		if v, ok := strings.CutPrefix(line, "fibril_fsync_appends_sum "); ok {
			fmt.Sscan(v, &appends)
		}
	}
	if syncs < 1 || appends < 2 {
		t.Errorf("fibril_fsync_appends: %v syncs completing %v appends; want the 2 durable publishes among them", syncs, appends)
	}
	for _, prefix := range []string{"go_goroutines ", "process_"} {
		if !bytes.Contains(r.body, []byte(prefix)) {
			t.Errorf("scrape lacks %s metrics", prefix)
		}
	}

	// A deleted queue's series go with it.
	f.do("DELETE", "/api/queues/orders", nil).want(t, http.StatusOK, nil)
	r = f.do("GET", "/metrics", nil).want(t, http.StatusOK, nil)
	if bytes.Contains(r.body, []byte(`queue="orders"`)) {
		t.Errorf("series of the deleted queue remain")
	}
}

// The scrape passes promtool's lint rules (promlint: names, units,
// counter suffixes, help text).
func TestMetricsLint(t *testing.T) {
	f := newFixture(t, Options{ServerConnections: func() int { return 2 }, Bridges: siteBridge,
		ServerStats: func() ServerStats { return ServerStats{PreHello: 3, PreHelloEvicted: 1} }})
	f.declare(map[string]any{"name": "orders", "durability": "durable"})
	f.do("POST", "/api/queues/orders/messages", map[string]any{"body": "x"}).want(t, http.StatusOK, nil)
	r := f.do("GET", "/metrics", nil).want(t, http.StatusOK, nil)
	problems, err := promlint.New(bytes.NewReader(r.body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "fibril_") {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
	}
}
