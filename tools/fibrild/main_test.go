package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
	"github.com/fibril-edge/fibril/internal/fibrildproc"
	"github.com/fibril-edge/fibril/internal/wiretest"
)

const waitLimit = 30 * time.Second

func TestFlags(t *testing.T) {
	dir := t.TempDir()
	badKey := filepath.Join(dir, "bad.toml")
	os.WriteFile(badKey, []byte("[storage]\ndata_dri = \"/x\"\n"), 0o644)
	good := filepath.Join(dir, "good.toml")
	os.WriteFile(good, []byte("[log]\nlevel = \"debug\"\n"), 0o644)

	for _, tc := range []struct {
		args       []string
		code       int
		wantStdout string
		wantStderr string
	}{
		{args: []string{"--version"}, wantStdout: "fibrild dev"},
		{args: []string{"--help"}, wantStderr: "--storage.data_dir"},
		{args: []string{"--print-config"}, wantStdout: "listen = '127.0.0.1:7420'"},
		{args: []string{"--print-config", "--server.listen", "0.0.0.0:9", "--server.tokens", "a,b"},
			wantStdout: "tokens = ['<redacted>', '<redacted>']"},
		{args: []string{"--print-config", "--config", good, "--storage.data_dir=/srv/fibril"},
			wantStdout: "data_dir = '/srv/fibril'"},
		{args: []string{"--print-config", "--config", good}, wantStdout: "level = 'debug'"},
		{args: []string{"--nope"}, code: 2, wantStderr: "unknown flag: --nope"},
		{args: []string{"extra"}, code: 2, wantStderr: `unexpected argument "extra"`},
		{args: []string{"--storage.segment_size", "huge"}, code: 2, wantStderr: "storage.segment_size"},
		{args: []string{"--log.format", "xml"}, code: 2, wantStderr: "log.format"},
		{args: []string{"--config", badKey}, code: 2, wantStderr: "unknown key storage.data_dri"},
		{args: []string{"--config", filepath.Join(dir, "missing.toml")}, code: 2, wantStderr: "missing.toml"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		if code != tc.code {
			t.Errorf("%q: exit %d, want %d; stderr: %s", tc.args, code, tc.code, stderr.String())
		}
		if !strings.Contains(stdout.String(), tc.wantStdout) {
			t.Errorf("%q: stdout %q lacks %q", tc.args, stdout.String(), tc.wantStdout)
		}
		if !strings.Contains(stderr.String(), tc.wantStderr) {
			t.Errorf("%q: stderr %q lacks %q", tc.args, stderr.String(), tc.wantStderr)
		}
	}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// buildDaemon builds fibrild once per test process, with a version stamp.
func buildDaemon(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build fibrild with")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fibrild-test-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "fibrild")
		out, err := exec.Command(goBin, "build", "-ldflags", "-X main.version=test-1", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = errors.New(string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("go build: %v", buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// daemonProcess is a running fibrild.
type daemonProcess struct {
	*fibrildproc.Process
	addr string
}

// startDaemon runs fibrild with args and waits for its "listening" lines.
// The data directory is args' --storage.data_dir, else a fresh one.
func startDaemon(t *testing.T, bin string, args ...string) *daemonProcess {
	t.Helper()
	data := ""
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--storage.data_dir" {
			data = args[i+1]
		}
	}
	if data == "" {
		data = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	p, err := fibrildproc.Start(ctx, fibrildproc.Options{Bin: bin, DataDir: data, Args: args, StartTimeout: waitLimit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return &daemonProcess{Process: p, addr: p.Addr}
}

func (p *daemonProcess) logText() string { return p.Log() }

// stop sends SIGTERM and checks for a clean exit.
func (p *daemonProcess) stop(t *testing.T) {
	t.Helper()
	if err := p.Stop(waitLimit); err != nil {
		t.Fatalf("fibrild exited with %v\n%s", err, p.Log())
	}
	for _, want := range []string{"shutting down", "broker closed", "stopped"} {
		if !strings.Contains(p.Log(), want) {
			t.Fatalf("log lacks %q:\n%s", want, p.Log())
		}
	}
}

// TestDaemonProcess builds fibrild and runs it as operators do: start,
// declare, publish and consume over the wire, SIGTERM, and a restart that
// still has the queue and its unacked message.
func TestDaemonProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the fibrild binary")
	}
	bin := buildDaemon(t)
	data := t.TempDir()
	args := []string{"--storage.data_dir", data, "--server.listen", "127.0.0.1:0", "--admin.listen", "127.0.0.1:0", "--storage.min_free", "0"}

	p := startDaemon(t, bin, args...)
	if !strings.Contains(p.logText(), "version=test-1") || !strings.Contains(p.logText(), "config=") {
		t.Fatalf("start-up log lacks the version or the config source:\n%s", p.logText())
	}
	c := wiretest.Dial(t, p.addr, "")
	c.Request(t, &wire.Declare{Corr: 1, Queue: "clicks", Durability: wire.DurabilityBuffered})
	c.Request(t, &wire.Publish{Corr: 2, Queue: "clicks", Body: []byte("one")})
	c.Request(t, &wire.Publish{Corr: 3, Queue: "clicks", Body: []byte("two")})
	c.Request(t, &wire.Subscribe{Corr: 4, SubID: 1, Queue: "clicks", Prefetch: 1})
	d := c.Next(t).(*wire.Deliver)
	if string(d.Body) != "one" {
		t.Fatalf("delivered %q, want one", d.Body)
	}
	c.Send(t, &wire.Ack{SubID: 1, Tags: []uint64{d.Tag}})
	c.Send(t, &wire.Goodbye{})
	c.DrainUntilClosed(t)
	p.stop(t)

	// The restart has the queue, its mode, and the unacked message.
	p = startDaemon(t, bin, args...)
	c = wiretest.Dial(t, p.addr, "")
	decl := c.Request(t, &wire.Declare{Corr: 1, Queue: "clicks"}).(*wire.Declared)
	if decl.Created || decl.Durability != wire.DurabilityBuffered {
		t.Fatalf("after restart: %+v", decl)
	}
	c.Request(t, &wire.Subscribe{Corr: 2, SubID: 1, Queue: "clicks"})
	if d := c.Next(t).(*wire.Deliver); string(d.Body) != "two" {
		t.Fatalf("after restart delivered %q, want two", d.Body)
	}
	c.NC.Close()
	p.stop(t)
}
