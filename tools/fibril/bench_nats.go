package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/spf13/pflag"
)

// "fibril bench nats-server" runs an embedded NATS server with JetStream
// in its own process, so that the bench measures it from /proc exactly as
// it measures fibrild. It prints "listening url=URL" on stdout once ready
// and shuts down cleanly when its stdin closes or it gets SIGTERM.
func runBenchNATSServer(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("fibril bench nats-server", pflag.ContinueOnError)
	store := fs.String("store", "", "JetStream storage directory")
	sync := fs.String("sync", "default", "always: fsync every write (sync_interval: always); default: the server's periodic sync")
	if done, err := parseFlags(fs, "Usage: fibril bench nats-server --store DIR [--sync always|default]\n", args, stdout); done || err != nil {
		return err
	}
	if *store == "" || (*sync != "always" && *sync != "default") {
		return usagef("--store is required and --sync must be always or default")
	}
	opts := &natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: *store,
		NoLog: true, NoSigs: true, SyncAlways: *sync == "always"}
	ns, err := natsserver.NewServer(opts)
	if err != nil {
		return fmt.Errorf("nats server: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(60 * time.Second) {
		ns.Shutdown()
		return errors.New("nats server not ready within 60s")
	}
	fmt.Fprintf(stdout, "listening url=%s\n", ns.ClientURL())
	stdinClosed := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	select {
	case <-ctx.Done():
	case <-stdinClosed:
	}
	ns.Shutdown()
	ns.WaitForShutdown()
	return nil
}

// natsChild is a running "fibril bench nats-server".
type natsChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	url    string
	exited chan struct{}
}

// startNATSChild runs this binary's nats-server helper with its store in
// dir and waits for its URL.
func startNATSChild(ctx context.Context, dir, sync string) (*natsChild, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this executable for the nats server: %w", err)
	}
	n := &natsChild{cmd: exec.Command(self, "bench", "nats-server", "--store", dir, "--sync", sync), exited: make(chan struct{})}
	n.cmd.Stderr = os.Stderr
	if n.stdin, err = n.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := n.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := n.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start nats server: %w", err)
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "listening url="); ok {
				urls <- u
			}
		}
		n.cmd.Wait()
		close(n.exited)
	}()
	select {
	case n.url = <-urls:
		return n, nil
	case <-n.exited:
		return nil, fmt.Errorf("nats server (%s sync) exited before listening: %v", sync, n.cmd.ProcessState)
	case <-ctx.Done():
		n.kill()
		return nil, ctx.Err()
	case <-time.After(90 * time.Second):
		n.kill()
		return nil, fmt.Errorf("nats server (%s sync) not listening within 90s", sync)
	}
}

func (n *natsChild) pid() int { return n.cmd.Process.Pid }

// stop closes the helper's stdin, which shuts the server down, and waits
// for it; past 30 s it is killed.
func (n *natsChild) stop() error {
	n.stdin.Close()
	select {
	case <-n.exited:
		return nil
	case <-time.After(30 * time.Second):
		n.kill()
		return errors.New("nats server did not stop within 30s of its stdin closing")
	}
}

func (n *natsChild) kill() {
	n.cmd.Process.Kill()
	<-n.exited
}
