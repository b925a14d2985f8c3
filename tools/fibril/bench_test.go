package main

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestBenchQuick runs "fibril bench --quick" end to end, against a real
// fibrild and two NATS servers in helper processes, and checks that its
// JSON lines are well formed; then --report --from renders them.
func TestBenchQuick(t *testing.T) {
	cli, _ := binaries(t) // fibrild is built beside fibril, where bench looks
	dir := t.TempDir()
	r := fibrilCLI(t, cli, "", nil, "bench", "--quick", "--dir", filepath.Join(dir, "data"))
	if r.code != 0 {
		t.Fatalf("fibril bench --quick: exit %d\n%s", r.code, r.stderr)
	}
	lines := jsonLines(t, r.stdout)
	modes := map[string][]string{"fibril": {"durable", "buffered"}, "jetstream": {"always-sync", "default-sync"}}
	seen := map[string]int{}
	footprints := 0
	for _, l := range lines {
		switch l["kind"] {
		case "footprint":
			footprints++
			checkFootprint(t, l)
		case "run":
			sys, _ := l["system"].(string)
			mode, _ := l["mode"].(string)
			cs, _ := l["case"].(string)
			if !slices.Contains(modes[sys], mode) || !slices.Contains(allCases, cs) {
				t.Errorf("run line with system %q, mode %q, case %q", sys, mode, cs)
			}
			seen[cs+" "+sys+" "+mode]++
			checkRun(t, l)
		default:
			t.Errorf("line of kind %v", l["kind"])
		}
	}
	for _, left := range []string{"startup-fibrild", "startup-nats"} {
		if _, err := os.Stat(filepath.Join(dir, "data", left)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the start-up measurement left %s in --dir (%v): a later run would start over it too", left, err)
		}
	}
	if footprints != 3 {
		t.Errorf("%d footprint lines, want 3 (fibrild and two NATS servers)", footprints)
	}
	for _, cs := range allCases {
		for sys, ms := range modes {
			for _, m := range ms {
				if n := seen[cs+" "+sys+" "+m]; n != 1 {
					t.Errorf("%s %s %s: %d runs, want 1", cs, sys, m, n)
				}
			}
		}
	}

	results := filepath.Join(dir, "results.jsonl")
	if err := os.WriteFile(results, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := filepath.Join(dir, "performance.md")
	if err := os.WriteFile(doc, []byte("# Performance\n\nkept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	args := []string{"bench", "--report", "--from", results, "--doc", doc, "--img", filepath.Join(dir, "img")}
	for range 2 { // the second report replaces the first
		if code := run(context.Background(), args, &out, &errOut); code != 0 {
			t.Fatalf("--report --from: exit %d: %s", code, errOut.String())
		}
	}
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	if !strings.HasPrefix(md, "# Performance\n\nkept\n") || strings.Count(md, reportBegin) != 1 ||
		!strings.Contains(md, "| rate-10k | fibril buffered |") || !strings.Contains(md, "img/"+plotName) {
		t.Fatalf("report:\n%s", md)
	}
	if _, err := os.Stat(filepath.Join(dir, "img", plotName)); err != nil {
		t.Fatal(err)
	}
}

// TestBenchCluster runs "fibril bench --cluster 3 --spread 4" briefly:
// three real fibrild nodes in one cluster, each stream spread over four
// queues of its mode declared with majority placement (so served by
// several nodes); every run must be sustained and measured on all three
// nodes.
func TestBenchCluster(t *testing.T) {
	cli, _ := binaries(t)
	dir := t.TempDir()
	r := fibrilCLI(t, cli, "", nil, "bench", "--quick", "--cluster", "3", "--spread", "4", "--systems", "fibril-buffered,cluster-durable,cluster-buffered",
		"--cases", "rate-100", "--footprint=false", "--dir", filepath.Join(dir, "data"))
	if r.code != 0 {
		t.Fatalf("fibril bench --cluster 3: exit %d\n%s", r.code, r.stderr)
	}
	seen := map[string]bool{}
	var soloRSS, clusterRSS float64
	for _, l := range jsonLines(t, r.stdout) {
		if l["kind"] != "run" {
			t.Errorf("line of kind %v", l["kind"])
			continue
		}
		checkRun(t, l)
		seen[l["system"].(string)+" "+l["mode"].(string)] = true
		if l["sustained"] != true {
			t.Errorf("%s %s: not sustained", l["system"], l["mode"])
		}
		rss := l["broker"].(map[string]any)["peak_rss_bytes"].(float64)
		if l["system"] == "fibril-4q" {
			soloRSS = rss
		} else {
			clusterRSS = max(clusterRSS, rss)
		}
	}
	for _, want := range []string{"fibril-4q buffered", "fibril-3n-4q durable", "fibril-3n-4q buffered"} {
		if !seen[want] {
			t.Errorf("no run of %s: %v", want, seen)
		}
	}
	// Three nodes' peaks summed: more than one broker's.
	if clusterRSS <= soloRSS {
		t.Errorf("the cluster's peak RSS %v is not above one broker's %v: not every node measured", clusterRSS, soloRSS)
	}
}

// checkRun checks one run line's fields.
func checkRun(t *testing.T, l map[string]any) {
	t.Helper()
	positive := func(path ...string) {
		t.Helper()
		var v any = l
		for _, k := range path {
			m, ok := v.(map[string]any)
			if !ok {
				t.Errorf("%s %s %s: no %s", l["case"], l["system"], l["mode"], strings.Join(path, "."))
				return
			}
			v = m[k]
		}
		if f, ok := v.(float64); !ok || f <= 0 {
			t.Errorf("%s %s %s: %s = %v, want a positive number", l["case"], l["system"], l["mode"], strings.Join(path, "."), v)
		}
	}
	for _, k := range []string{"run", "order", "seconds", "publishers", "window", "payload", "sent"} {
		positive(k)
	}
	positive("env", "cpus")
	positive("env", "fsync_floor_p50_us")
	positive("broker", "peak_rss_bytes")
	if k, _ := l["env"].(map[string]any)["kernel"].(string); k == "" {
		t.Errorf("no kernel in env")
	}
	sustained, ok := l["sustained"].(bool)
	if !ok {
		t.Fatalf("no sustained field: %v", l)
	}
	if l["case"] == "saturation" || !sustained {
		if _, has := l["deliver"]; has && !sustained {
			t.Errorf("%s %s %s: not sustained, yet latencies reported", l["case"], l["system"], l["mode"])
		}
		if l["case"] == "saturation" && l["system"] == "fibril" {
			positive("confirmed_per_sec")
		}
		return
	}
	positive("confirmed_per_sec")
	positive("delivered_per_sec")
	lats := []string{"confirm", "deliver"}
	if l["case"] != "one-sync" { // open loop: the delivery split where the broker took the publish
		lats = append(lats, "receive", "receive_to_deliver")
	}
	for _, lat := range lats {
		for _, k := range []string{"n", "p50_us", "p99_us", "p999_us", "max_us"} {
			positive(lat, k)
		}
		m := l[lat].(map[string]any)
		if m["p50_us"].(float64) > m["p99_us"].(float64) || m["p99_us"].(float64) > m["max_us"].(float64) {
			t.Errorf("%s %s %s: %s percentiles out of order: %v", l["case"], l["system"], l["mode"], lat, m)
		}
	}
}

// checkFootprint checks one footprint line's fields.
func checkFootprint(t *testing.T, l map[string]any) {
	t.Helper()
	if f, _ := l["idle_rss_bytes"].(float64); f <= 0 {
		t.Errorf("footprint of %v: idle RSS %v", l["process"], l["idle_rss_bytes"])
	}
	if _, ok := l["idle_wakeups_per_sec"].(float64); !ok {
		t.Errorf("footprint of %v: no idle wake-ups", l["process"])
	}
	if l["process"] == "fibrild" {
		if f, _ := l["binary_bytes"].(float64); f <= 0 {
			t.Errorf("fibrild binary size %v", l["binary_bytes"])
		}
		if f, _ := l["startup_seconds"].(float64); f <= 0 {
			t.Errorf("fibrild start-up %v", l["startup_seconds"])
		}
		// --quick declares 20 empty queues: each takes a segment's first
		// reservation on disk (256 KiB, no more than 1 MiB with its
		// metadata) and at least one open file.
		if f, _ := l["queues"].(float64); f != 20 {
			t.Errorf("fibrild footprint of %v queues, want 20", l["queues"])
		}
		if f, _ := l["queue_disk_bytes"].(float64); f < 256<<10 || f > 1<<20 {
			t.Errorf("an empty queue's disk %v, want 256 KiB to 1 MiB", l["queue_disk_bytes"])
		}
		if f, _ := l["queue_open_files"].(float64); f < 1 {
			t.Errorf("an empty queue's open files %v, want at least 1", l["queue_open_files"])
		}
		if f, _ := l["queues_rss_bytes"].(float64); f <= 0 {
			t.Errorf("RSS with %v queues: %v", l["queues"], l["queues_rss_bytes"])
		}
	}
}

func TestStraceTotal(t *testing.T) {
	summary := `% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 75.68    0.901286         420      2145           fsync
 24.32    0.170461          86      1979         3 fdatasync
------ ----------- ----------- --------- --------- ----------------
100.00    1.190942         265      4124         3 total
`
	if n, ok := straceTotal([]byte(summary)); !ok || n != 4124 {
		t.Fatalf("straceTotal = %d, %v; want 4124", n, ok)
	}
	if _, ok := straceTotal(nil); ok {
		t.Fatal("an empty summary has no total")
	}
}

func TestSpliceReport(t *testing.T) {
	first := spliceReport("# Perf\n\nkept", reportBegin+"\none\n"+reportEnd)
	if !strings.HasPrefix(first, "# Perf\n\nkept\n\n## End to end\n\n"+reportBegin) {
		t.Fatalf("appended:\n%s", first)
	}
	second := spliceReport(first+"\nafter\n", reportBegin+"\ntwo\n"+reportEnd)
	if strings.Contains(second, "one") || !strings.Contains(second, "two") || !strings.HasSuffix(second, "\nafter\n") ||
		strings.Count(second, "## End to end") != 1 {
		t.Fatalf("replaced:\n%s", second)
	}
}

func TestABBA(t *testing.T) {
	list := []string{"a", "b", "c"}
	if got := abba(list, 1); !slices.Equal(got, list) {
		t.Fatalf("run 1: %v", got)
	}
	if got := abba(list, 2); !slices.Equal(got, []string{"c", "b", "a"}) {
		t.Fatalf("run 2: %v", got)
	}
	if !slices.Equal(list, []string{"a", "b", "c"}) {
		t.Fatal("abba changed its input")
	}
}
