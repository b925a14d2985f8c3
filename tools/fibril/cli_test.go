package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/federation/uplink"
	"github.com/fibril-edge/fibril/internal/fibrildproc"
)

// These tests build the real fibril and fibrild binaries (once per test
// binary, without -race so the daemon runs at its real speed) and run the
// CLI as an operator would, against fibrild on loopback.

const cliWait = 60 * time.Second

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// binaries returns the paths of the built fibril and fibrild.
func binaries(t *testing.T) (cli, daemon string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the fibril and fibrild binaries")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the binaries with")
	}
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "fibril-cli-test-"); buildErr != nil {
			return
		}
		for _, b := range []struct{ out, pkg string }{{"fibril", "."}, {"fibrild", "../fibrild"}} {
			out, err := exec.Command(goBin, "build", "-o", filepath.Join(buildDir, b.out), b.pkg).CombinedOutput()
			if err != nil {
				buildErr = errors.New("go build " + b.pkg + ": " + string(out))
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "fibril"), filepath.Join(buildDir, "fibrild")
}

func TestMain(m *testing.M) {
	// The machine's own contexts (context.go) stay out of the tests.
	cfg, err := os.MkdirTemp("", "fibril-cli-config-")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_CONFIG_HOME", cfg)
	os.Unsetenv(envContext)
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.RemoveAll(cfg)
	os.Exit(code)
}

// fibrild is a running daemon.
type fibrild struct {
	*fibrildproc.Process
	data   string
	server string // client protocol address
	admin  string // admin API URL
}

// startFibrild runs fibrild on a fresh data directory and waits until it
// listens on both its client protocol and its admin API.
func startFibrild(t *testing.T, daemonBin string, extra ...string) *fibrild {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliWait)
	defer cancel()
	data := t.TempDir()
	p, err := fibrildproc.Start(ctx, fibrildproc.Options{Bin: daemonBin, DataDir: data, StartTimeout: cliWait,
		Args: append([]string{"--storage.min_free", "0"}, extra...)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return &fibrild{Process: p, data: data, server: p.Addr, admin: p.Admin}
}

// stop ends fibrild with SIGTERM and waits for it.
func (d *fibrild) stop(t *testing.T) {
	t.Helper()
	if err := d.Stop(cliWait); err != nil {
		t.Fatalf("fibrild did not stop cleanly: %v\n%s", err, d.Log())
	}
}

// cliResult is one run of the fibril binary.
type cliResult struct {
	code           int
	stdout, stderr string
}

// fibrilCLI runs the binary with args, stdin and environment env (added to
// a clean one), and returns its exit status and output.
func fibrilCLI(t *testing.T, bin, stdin string, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	default:
		t.Fatalf("fibril %q: %v", args, err)
	}
	return res
}

// want checks the exit status and that stdout and stderr contain the
// given parts.
func (r cliResult) want(t *testing.T, code int, stdoutHas, stderrHas string) {
	t.Helper()
	if r.code != code || !strings.Contains(r.stdout, stdoutHas) || !strings.Contains(r.stderr, stderrHas) {
		t.Fatalf("exit %d (want %d)\nstdout: %s(want %q)\nstderr: %s(want %q)", r.code, code, r.stdout, stdoutHas, r.stderr, stderrHas)
	}
}

// declareOverWire declares a queue with the Go client, for tests that must
// not depend on the admin API.
func declareOverWire(t *testing.T, addr string, q client.QueueConfig) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliWait)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.DeclareQueue(ctx, q); err != nil {
		t.Fatal(err)
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// fibril uplink status prints each uplink's link and a row per queue with
// its backlog and counters, and marks a weakened promise.
func TestPrintUplinks(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	var out strings.Builder
	err := printUplinks(&out, []uplink.Stats{{Name: "to-hq", To: []string{"hq1:7420"}, State: uplink.StateConnected, Remote: "hq1:7420",
		Window: 64, Queues: []uplink.QueueStats{{Local: "sensors", Remote: "site7-sensors", State: uplink.StateConnected,
			LocalDurability: "durable", RemoteDurability: "buffered", Weakened: true, BacklogMessages: 3, BacklogBytes: 3 << 10,
			Forwarded: 97, Resent: 4, LastConfirm: now.Add(-2 * time.Second)}}}}, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"uplink to-hq: connected, connected to hq1:7420", "sensors -> site7-sensors",
		"durable -> buffered WEAKENED", "3 (3.0KiB)", "97", "2s ago", "sensors is durable here and buffered there"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := printUplinks(&out, nil, now); err != nil || !strings.Contains(out.String(), "no uplinks") {
		t.Errorf("no uplinks printed %q (%v)", out.String(), err)
	}
}

// The checked-in fibril(1) is what the commands say: every command, its
// usage, description and flags, from its own --help. Run `make man` after
// changing a command.
func TestManPageIsCurrent(t *testing.T) {
	for _, k := range []string{"FIBRIL_SERVER", "FIBRIL_ADMIN", "FIBRIL_ADMIN_CA", "FIBRIL_TOKEN", "FIBRIL_CONTEXT", "XDG_CONFIG_HOME"} {
		t.Setenv(k, "") // restored after the test; runMan unsets them
	}
	var out strings.Builder
	if code := runMan(&out); code != exitOK {
		t.Fatalf("fibril __man exited %d", code)
	}
	want, err := os.ReadFile("../../packaging/man/fibril.1")
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != string(want) {
		t.Fatal("packaging/man/fibril.1 is not what the commands' --help says: run `make man`")
	}
	for _, c := range commands {
		if !strings.Contains(out.String(), `.SS "fibril `+manEscape(strings.Join(c.path, " "))+`"`) {
			t.Errorf("the page has no section for %v", c.path)
		}
	}
}
