package main

import (
	"os"
	"strings"
	"testing"
)

func TestDoctor(t *testing.T) {
	dir := t.TempDir()
	args := []string{"doctor", "--dir", dir, "--samples", "5", "--records", "64"}
	r := runCLI(args...)
	r.want(t, 0, "Durable queues: a publish is confirmed", "measuring")
	for _, want := range []string{"fdatasync:", "one fdatasync: about", "with 64 concurrent publishers", "Buffered queues"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = runCLI(append(args, "--json")...)
	lines := jsonLines(t, r.stdout)
	if r.code != 0 || len(lines) != 1 || lines[0]["fdatasync_p50_us"].(float64) <= 0 ||
		lines[0]["group_commit_per_sec"].(float64) <= 0 || lines[0]["warnings"] == nil {
		t.Fatalf("doctor --json: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("doctor left files behind: %v", left)
	}
	runCLI("doctor", "--dir", dir+"/missing").want(t, 3, "", "--dir")
	runCLI("doctor", "--samples", "0").want(t, 2, "", "at least 1")
}

func TestDoctorWarnings(t *testing.T) {
	for _, tc := range []struct {
		r    doctorReport
		want string
	}{
		{doctorReport{FS: "tmpfs", FdatasyncP50: 1, FdatasyncP99: 2}, "memory, not disk"},
		{doctorReport{FS: "ext4", FdatasyncP50: 5, FdatasyncP99: 8}, "acknowledges flushes"},
		{doctorReport{FS: "ext4", FdatasyncP50: 8000, FdatasyncP99: 9000}, "over 5 ms"},
		{doctorReport{FS: "ext4", FdatasyncP50: 300, FdatasyncP99: 9000}, "ten times its median"},
		{doctorReport{FS: "ext4", FdatasyncP50: 300, FdatasyncP99: 600}, ""},
	} {
		got := strings.Join(doctorWarnings(tc.r), "\n")
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%+v: warnings %q, want %q", tc.r, got, tc.want)
		}
	}
}
