package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
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
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// fibrild is a running daemon.
type fibrild struct {
	cmd    *exec.Cmd
	data   string
	server string // client protocol address
	admin  string // admin API URL
	mu     sync.Mutex
	log    bytes.Buffer
	exited chan struct{}
}

var listenLine = regexp.MustCompile(`msg="?listening"? proto=(\w+) addr=(\S+)`)

// startFibrild runs fibrild on a fresh data directory and waits until it
// listens on both its client protocol and its admin API.
func startFibrild(t *testing.T, daemonBin string, extra ...string) *fibrild {
	t.Helper()
	empty := filepath.Join(t.TempDir(), "empty.toml") // keep /etc/fibril out of the test
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d := &fibrild{data: t.TempDir(), exited: make(chan struct{})}
	d.cmd = exec.Command(daemonBin, "--config", empty, "--storage.data_dir", d.data,
		"--server.listen", "127.0.0.1:0", "--admin.listen", "127.0.0.1:0", "--storage.min_free", "0")
	d.cmd.Args = append(d.cmd.Args, extra...)
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan [2]string, 4)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			d.mu.Lock()
			d.log.WriteString(sc.Text() + "\n")
			d.mu.Unlock()
			if m := listenLine.FindStringSubmatch(sc.Text()); m != nil {
				addrs <- [2]string{m[1], m[2]}
			}
		}
		io.Copy(io.Discard, stderr)
		d.cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		<-d.exited
	})
	deadline := time.After(cliWait)
	for d.server == "" || d.admin == "" {
		select {
		case a := <-addrs:
			switch a[0] {
			case "fibril":
				d.server = a[1]
			case "admin":
				d.admin = "http://" + a[1]
			}
		case <-d.exited:
			t.Fatalf("fibrild exited before listening:\n%s", d.logText())
		case <-deadline:
			t.Fatalf("fibrild did not listen within %v:\n%s", cliWait, d.logText())
		}
	}
	return d
}

func (d *fibrild) logText() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.String()
}

// stop ends fibrild with SIGTERM and waits for it.
func (d *fibrild) stop(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.exited:
	case <-time.After(cliWait):
		t.Fatalf("fibrild did not stop:\n%s", d.logText())
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
