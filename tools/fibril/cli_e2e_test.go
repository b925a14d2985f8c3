package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/internal/fibrildproc"
)

// jsonLines decodes every line of out as a JSON object.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var o map[string]any
		if err := json.Unmarshal([]byte(line), &o); err != nil {
			t.Fatalf("line %q is not a JSON object: %v", line, err)
		}
		objs = append(objs, o)
	}
	return objs
}

// TestCLIPubSub publishes and consumes with the binaries, over the wire.
func TestCLIPubSub(t *testing.T) {
	cli, daemonBin := binaries(t)
	d := startFibrild(t, daemonBin)
	declareOverWire(t, d.server, client.Queue("orders").Durable())
	env := []string{envServer + "=" + d.server}
	pub := func(stdin string, args ...string) cliResult {
		return fibrilCLI(t, cli, stdin, env, append([]string{"pub", "orders"}, args...)...)
	}

	pub("", "one", "two").want(t, 0, "partition=0 offset=0\npartition=0 offset=1\n", "")
	r := pub("", "three", "--json", "--id", "m3", "--header", "k=v")
	if objs := jsonLines(t, r.stdout); r.code != 0 || len(objs) != 1 || objs[0]["offset"] != 2.0 || objs[0]["duplicate"] != false {
		t.Fatalf("pub --json: exit %d, %q", r.code, r.stdout)
	}
	pub("", "three", "--id", "m3").want(t, 0, "partition=0 offset=3\n", "") // no dedupe window: stored again
	pub("four\nfive\n", "-").want(t, 0, "partition=0 offset=4\npartition=0 offset=5\n", "")
	r = pub("", "bulk", "--count", "20", "--json")
	if objs := jsonLines(t, r.stdout); r.code != 0 || len(objs) != 1 || objs[0]["published"] != 20.0 {
		t.Fatalf("pub --count --json: exit %d, %q, %s", r.code, r.stdout, r.stderr)
	}
	pub("", "bulk", "--count", "3", "--progress").want(t, 0, "published 3 messages to orders", "publishing [")

	sub := func(args ...string) cliResult {
		return fibrilCLI(t, cli, "", env, append([]string{"sub", "orders"}, args...)...)
	}
	// requeue puts the first message back, so it comes again at once.
	r = sub("--max", "1", "--ack", "requeue")
	r.want(t, 0, "partition=0 offset=0\tone\n", "")
	r = sub("--max", "3", "--json")
	objs := jsonLines(t, r.stdout)
	if r.code != 0 || len(objs) != 3 || objs[0]["body"] != "one" || objs[0]["deliveries"] != 2.0 ||
		objs[2]["id"] != "m3" || objs[2]["headers"] == nil {
		t.Fatalf("sub --json: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	// The rest: 20+3+3 (the second "three", four, five, the bulk ones).
	r = sub("--timeout", "2s", "--ack", "ack")
	if r.code != 0 || strings.Count(r.stdout, "\n") != 26 || !strings.Contains(r.stdout, "offset=4\tfour") {
		t.Fatalf("sub --timeout: exit %d, %d lines\n%s\n%s", r.code, strings.Count(r.stdout, "\n"), r.stdout, r.stderr)
	}
	sub("--timeout", "200ms").want(t, 0, "", "")

	// Errors and their exit statuses.
	fibrilCLI(t, cli, "", env, "pub", "nosuch", "x").want(t, 3, "", "declare it first")
	fibrilCLI(t, cli, "", env, "sub", "nosuch", "--max", "1").want(t, 3, "", "nosuch")
	fibrilCLI(t, cli, "", env, "sub", "orders", "--ack", "maybe").want(t, 2, "", "--ack")
	fibrilCLI(t, cli, "", env, "pub").want(t, 2, "", "missing QUEUE")
	fibrilCLI(t, cli, "", nil, "pub", "orders", "x", "--server", closedPort(t)).want(t, 1, "", "cannot reach fibrild")
}

// TestCLIAdmin runs the queue and settings commands against fibrild's
// admin API, then verifies and dumps the logs it wrote.
func TestCLIAdmin(t *testing.T) {
	cli, daemonBin := binaries(t)
	d := startFibrild(t, daemonBin)
	env := []string{envAdmin + "=" + d.admin, envServer + "=" + d.server}
	run := func(args ...string) cliResult { return fibrilCLI(t, cli, "", env, args...) }

	run("queue", "declare", "clicks", "--buffered", "--partitions", "2").want(t, 0, "declared clicks", "")
	run("queue", "declare", "clicks", "--durable").want(t, 4, "", "fibril queue rm clicks")
	run("queue", "declare", "bad name!").want(t, 1, "", "")
	run("pub", "clicks", "a", "b", "--key", "k").want(t, 0, "offset=1", "")
	run("queue", "ls").want(t, 0, "clicks", "")
	r := run("queue", "ls", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"clicks"`) || !json.Valid([]byte(r.stdout)) {
		t.Fatalf("queue ls --json: %d %s %s", r.code, r.stdout, r.stderr)
	}
	run("queue", "info", "clicks").want(t, 0, "buffered", "")
	r = run("queue", "info", "clicks", "--json")
	if r.code != 0 || !json.Valid([]byte(r.stdout)) || !strings.Contains(r.stdout, "buffered") {
		t.Fatalf("queue info --json: %d %s %s", r.code, r.stdout, r.stderr)
	}
	run("queue", "info", "nosuch").want(t, 3, "", "nosuch")

	run("settings", "get").want(t, 0, "storage.background_sync_interval_ms", "")
	run("settings", "set", "storage.background_sync_interval_ms=250").want(t, 0, "= 250", "")
	r = run("settings", "get", "storage.background_sync_interval_ms", "--json")
	if objs := jsonLines(t, r.stdout); r.code != 0 || len(objs) != 1 || objs[0]["storage.background_sync_interval_ms"] != 250.0 {
		t.Fatalf("settings get --json: %d %s %s", r.code, r.stdout, r.stderr)
	}
	run("settings", "set", "storage.background_sync_interval_ms=-5").want(t, 1, "", "")
	run("settings", "set", "no.such=1").want(t, 3, "", "no setting")
	run("settings", "get", "no.such").want(t, 3, "", "no setting")

	run("pub", "clicks", "kept").want(t, 0, "", "")
	run("queue", "rm", "clicks").want(t, 1, "", "pass --force")
	run("queue", "info", "clicks").want(t, 0, "buffered", "")
	run("queue", "rm", "clicks", "--force").want(t, 0, "deleted clicks", "")
	run("queue", "rm", "clicks").want(t, 3, "", "")
	fibrilCLI(t, cli, "", nil, "queue", "ls", "--admin", "http://"+closedPort(t)).want(t, 1, "", "cannot reach fibrild's admin API")
}

// TestCLILogVerify verifies the logs of a stopped fibrild.
func TestCLILogVerify(t *testing.T) {
	cli, daemonBin := binaries(t)
	d := startFibrild(t, daemonBin)
	declareOverWire(t, d.server, client.Queue("events").Durable())
	fibrilCLI(t, cli, "", nil, "pub", "events", "x", "y", "z", "--server", d.server).want(t, 0, "offset=2", "")
	d.stop(t)

	r := fibrilCLI(t, cli, "", nil, "log", "verify", d.data)
	r.want(t, 0, "records", "")
	if !strings.Contains(r.stdout, "ok\n") {
		t.Fatalf("log verify: %s", r.stdout)
	}
	r = fibrilCLI(t, cli, "", nil, "log", "verify", d.data, "--json")
	var found bool
	for _, o := range jsonLines(t, r.stdout) {
		if strings.Contains(o["dir"].(string), "events") && o["records"].(float64) >= 3 {
			found = true
		}
	}
	if r.code != 0 || !found {
		t.Fatalf("log verify --json: %d %s %s", r.code, r.stdout, r.stderr)
	}
	fibrilCLI(t, cli, "", nil, "log", "dump", d.data+"/queues/events/0").want(t, 0, "\tpublish\t", "")
	fibrilCLI(t, cli, "", nil, "log", "verify", d.data+"/nothing").want(t, 3, "", "does not exist")
}

// TestCLIToken checks --token and FIBRIL_TOKEN against a fibrild that
// requires a token.
func TestCLIToken(t *testing.T) {
	cli, daemonBin := binaries(t)
	d := startFibrild(t, daemonBin, "--server.tokens", "s3cret")
	env := []string{envServer + "=" + d.server}
	fibrilCLI(t, cli, "", env, "pub", "q", "x").want(t, 1, "", "pass --token or set FIBRIL_TOKEN")
	fibrilCLI(t, cli, "", env, "pub", "q", "x", "--token", "wrong").want(t, 1, "", "refused the token")
	// The right token gets as far as the queue, which does not exist.
	fibrilCLI(t, cli, "", append(env, envToken+"=s3cret"), "pub", "q", "x").want(t, 3, "", "declare it first")
	if d.admin != "" {
		env = []string{envAdmin + "=" + d.admin}
		fibrilCLI(t, cli, "", env, "queue", "ls").want(t, 1, "", "FIBRIL_TOKEN")
		fibrilCLI(t, cli, "", append(env, envToken+"=s3cret"), "queue", "ls").want(t, 0, "NAME", "")
	}
}

// fibril sub, with fibrild shutting down under it, says the subscription
// ended and why, and exits 1 (a failure, not a usage error or a crash).
func TestCLISubWhenFibrildStops(t *testing.T) {
	cli, daemonBin := binaries(t)
	d := startFibrild(t, daemonBin)
	declareOverWire(t, d.server, client.Queue("jobs").Durable())
	fibrilCLI(t, cli, "", []string{envServer + "=" + d.server}, "pub", "jobs", "first").want(t, 0, "offset=0", "")
	ctx, cancel := context.WithTimeout(context.Background(), cliWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, "sub", "jobs", "--ack", "none")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), envServer + "=" + d.server}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.Contains(line, "first") {
		t.Fatalf("sub printed %q (%v) before fibrild stopped", line, err)
	}
	d.stop(t)
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(stderr.String(), "subscription to jobs ended") {
		t.Fatalf("sub after fibrild stopped: %v, stderr %q", err, stderr.String())
	}
}

// A fibrild whose metadata store is lost refuses to start, naming the
// queue and fibril recover; fibril recover declares the queue again from
// its logs, refuses while fibrild runs, and the restarted fibrild serves
// the queue with its unacked messages.
func TestCLIRecoverLostMetadata(t *testing.T) {
	cli, daemonBin := binaries(t)
	d := startFibrild(t, daemonBin)
	declareOverWire(t, d.server, client.Queue("ledger").Durable().Partitions(1))
	fibrilCLI(t, cli, "", nil, "pub", "ledger", "a", "b", "c", "--server", d.server).want(t, 0, "offset=2", "")
	fibrilCLI(t, cli, "", nil, "recover", d.data).want(t, 1, "", "already running")
	d.stop(t)
	if err := os.RemoveAll(filepath.Join(d.data, "meta")); err != nil {
		t.Fatal(err)
	}
	restart := func() (*fibrildproc.Process, error) {
		ctx, cancel := context.WithTimeout(context.Background(), cliWait)
		defer cancel()
		p, err := fibrildproc.Start(ctx, fibrildproc.Options{Bin: daemonBin, DataDir: d.data, StartTimeout: cliWait,
			Args: []string{"--storage.min_free", "0"}})
		if p != nil {
			t.Cleanup(p.Kill)
		}
		return p, err
	}
	if p, err := restart(); err == nil {
		t.Fatalf("fibrild started without its metadata store:\n%s", p.Log())
	} else if !strings.Contains(err.Error(), "fibril recover") || !strings.Contains(err.Error(), "ledger") {
		t.Fatalf("fibrild without its metadata store: %v; want a refusal naming ledger and fibril recover", err)
	}
	fibrilCLI(t, cli, "", nil, "recover", d.data).want(t, 0, "ledger: declared again as it was: durable, 1 partitions", "")
	fibrilCLI(t, cli, "", nil, "recover", d.data).want(t, 0, "nothing to recover", "")
	p, err := restart()
	if err != nil {
		t.Fatal(err)
	}
	r := fibrilCLI(t, cli, "", nil, "sub", "ledger", "--max", "3", "--server", p.Addr)
	r.want(t, 0, "c", "")
	for _, b := range []string{"a", "b", "c"} {
		if !strings.Contains(r.stdout, b) {
			t.Fatalf("after recovery sub printed %q; want a, b and c", r.stdout)
		}
	}
}
