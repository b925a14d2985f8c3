package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRunDispatch(t *testing.T) {
	tests := []struct {
		args       []string
		code       int
		wantStdout string
		wantStderr string
	}{
		{args: []string{"--version"}, code: 0, wantStdout: "fibril dev"},
		{args: []string{"--help"}, code: 0, wantStdout: "log bench"},
		{args: nil, code: 2, wantStderr: "Usage: fibril"},
		{args: []string{"nope"}, code: 2, wantStderr: `unknown command "nope"`},
		{args: []string{"log"}, code: 2, wantStderr: "Usage: fibril"},
		{args: []string{"log", "bench", "--help"}, code: 0, wantStdout: "Usage: fibril log bench"},
		{args: []string{"log", "bench", "--batch", "x"}, code: 2, wantStderr: "--batch"},
		{args: []string{"--help"}, code: 0, wantStdout: "4  conflict"},
		{args: []string{"queue"}, code: 2, wantStderr: "queue declare"},
		{args: []string{"queue", "ls", "--nope"}, code: 2, wantStderr: "unknown flag: --nope"},
		{args: []string{"queue", "rm", "--help"}, code: 0, wantStdout: "Usage: fibril queue rm NAME"},
		{args: []string{"sub", "--help"}, code: 0, wantStdout: "requeue"},
		{args: []string{"queue", "--help"}, code: 0, wantStdout: "queue rm"},
		{args: []string{"help", "cluster"}, code: 0, wantStdout: "cluster certs"},
		{args: []string{"queue"}, code: 2, wantStderr: "Usage: fibril queue <command>"},
		{args: []string{"-s", "127.0.0.1:1", "pub", "--help"}, code: 0, wantStdout: "-s, --server"},
		{args: []string{"--admin", "http://127.0.0.1:1", "--json", "queue", "ls", "--nope"}, code: 2, wantStderr: "unknown flag: --nope"},
		{args: []string{"help"}, code: 0, wantStdout: "Commands:"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tt.args, &stdout, &stderr)
		if code != tt.code {
			t.Errorf("run(%q) = %d, want %d; stderr: %s", tt.args, code, tt.code, stderr.String())
		}
		if !strings.Contains(stdout.String(), tt.wantStdout) {
			t.Errorf("run(%q) stdout %q lacks %q", tt.args, stdout.String(), tt.wantStdout)
		}
		if !strings.Contains(stderr.String(), tt.wantStderr) {
			t.Errorf("run(%q) stderr %q lacks %q", tt.args, stderr.String(), tt.wantStderr)
		}
	}
}
