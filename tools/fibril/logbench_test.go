package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// runBench runs "fibril log bench" with args in a fresh directory and
// returns every stdout line decoded.
func runBench(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	args = append(args, "--dir", dir)
	if err := runLogBench(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("log bench %v: %v\nstderr:\n%s", args, err, stderr.String())
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("bench left %d entries in --dir", len(left))
	}
	var lines []map[string]any
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		for _, k := range []string{"kernel", "fs", "cpus", "go"} {
			if _, ok := m[k]; !ok {
				t.Errorf("line %q lacks %q", sc.Text(), k)
			}
		}
		lines = append(lines, m)
	}
	return lines
}

func positive(t *testing.T, line map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if v, ok := line[k].(float64); !ok || v <= 0 {
			t.Errorf("%s = %v, want a positive number in %v", k, line[k], line)
		}
	}
}

func TestLogBenchMatrixEndToEnd(t *testing.T) {
	lines := runBench(t, "--records", "200", "--warmup", "50",
		"--policy", "none,on_commit", "--batch", "1,16", "--concurrency", "1,8")
	if len(lines) != 8 {
		t.Fatalf("got %d case lines, want 8", len(lines))
	}
	for _, l := range lines {
		if l["kind"] != "case" || l["records"] != 200.0 {
			t.Errorf("unexpected case line %v", l)
		}
		positive(t, l, "records_per_sec", "p50_us", "p99_us", "p999_us", "syncs")
		if l["p50_us"].(float64) > l["p999_us"].(float64) {
			t.Errorf("p50 above p999 in %v", l)
		}
		wantSamples := 200.0
		if l["batch"] == 16.0 {
			wantSamples = 13 // ceil(200/16)
		}
		if l["samples"] != wantSamples {
			t.Errorf("samples = %v, want %v in %v", l["samples"], wantSamples, l)
		}
	}
}

func TestLogBenchFloorEndToEnd(t *testing.T) {
	lines := runBench(t, "--floor", "--floor-samples", "20", "--records", "300")
	if len(lines) != 1 || lines[0]["kind"] != "floor" {
		t.Fatalf("want one floor line, got %v", lines)
	}
	positive(t, lines[0], "write_p50_us", "write_p99_us", "fdatasync_p50_us",
		"fdatasync_p99_us", "group_commit_64_per_sec", "group_commit_syncs")
}

func TestLogBenchRecoveryEndToEnd(t *testing.T) {
	lines := runBench(t, "--recovery", "--recovery-bytes", "4MiB")
	if len(lines) != 1 || lines[0]["kind"] != "recovery" {
		t.Fatalf("want one recovery line, got %v", lines)
	}
	l := lines[0]
	positive(t, l, "segment_bytes", "open_seconds", "gib_per_sec", "records")
	got, size := l["segment_bytes"].(float64), l["segment_size"].(float64)
	if got < 4<<20 || got > size {
		t.Errorf("segment_bytes = %v, want between 4 MiB and the segment size %v", got, size)
	}
}

func TestLogBenchFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--policy", "sometimes"},
		{"--batch", "0"},
		{"--prealloc", "maybe"},
		{"--records", "0"},
		{"--no-such-flag"},
		{"extra"},
	} {
		var out, errOut bytes.Buffer
		err := runLogBench(context.Background(), args, &out, &errOut)
		if _, ok := err.(*usageError); !ok {
			t.Errorf("log bench %v: err = %v, want a usage error", args, err)
		}
	}
}

func TestLogBenchHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := runLogBench(context.Background(), []string{"--help"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--policy", "--floor", "--recovery-bytes", "p999_us", "group_commit_64_per_sec"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
}
