// Command fibril is the operator's tool for fibril nodes. Each subcommand
// lives in its own file and is listed in the commands table below.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// A command is one subcommand, named by the words that follow "fibril".
// run gets the arguments after those words. It returns a usageError for
// bad invocations (exit status 2) and any other error for failures (1).
type command struct {
	path    []string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands is every subcommand. Add new ones here.
var commands = []command{
	{path: []string{"pub"}, summary: "publish messages to a queue", run: runPub},
	{path: []string{"sub"}, summary: "consume messages from a queue", run: runSub},
	{path: []string{"queue", "ls"}, summary: "list queues (admin API)", run: runQueueLs},
	{path: []string{"queue", "info"}, summary: "show a queue's state per partition (admin API)", run: runQueueInfo},
	{path: []string{"queue", "declare"}, summary: "create a queue (admin API)", run: runQueueDeclare},
	{path: []string{"queue", "rm"}, summary: "delete a queue and its messages (admin API)", run: runQueueRm},
	{path: []string{"settings", "get"}, summary: "show runtime settings (admin API)", run: runSettingsGet},
	{path: []string{"settings", "set"}, summary: "change runtime settings (admin API)", run: runSettingsSet},
	{path: []string{"cluster", "status"}, summary: "show members, leader and placement (admin API)", run: runClusterStatus},
	{path: []string{"cluster", "join"}, summary: "join this node to a cluster through a peer (admin API)", run: runClusterJoin},
	{path: []string{"cluster", "certs"}, summary: "make the CA and node certificates that secure the cluster port", run: runClusterCerts},
	{path: []string{"log", "verify"}, summary: "check segment logs offline; exit 1 on corruption", run: runLogVerify},
	{path: []string{"log", "dump"}, summary: "print a segment log's records offline", run: runLogDump},
	{
		path:    []string{"log", "bench"},
		summary: "benchmark the segment log and the storage under it",
		run:     runLogBench,
	},
	{path: []string{"recover"}, summary: "declare again, or remove, queues whose logs lost their metadata (offline)", run: runRecover},
	{path: []string{"doctor"}, summary: "measure the disk and say what durable and buffered queues cost", run: runDoctor},
}

// completion walks the commands table, so it joins it in init.
func init() {
	commands = append(commands, command{path: []string{"completion"},
		summary: "print a bash, zsh or fish completion script", run: runCompletion})
}

// usageError marks an invocation mistake; main prints it with the usage
// hint and exits with status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches args to a command and returns the process exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 {
		switch args[0] {
		case "--version", "version":
			fmt.Fprintf(stdout, "fibril %s\n", version)
			return 0
		case "-h", "--help", "help":
			printUsage(stdout)
			return 0
		}
	}
	cmd, rest, ok := findCommand(args)
	if !ok {
		if len(args) > 0 {
			fmt.Fprintf(stderr, "fibril: unknown command %q\n\n", strings.Join(args, " "))
		}
		printUsage(stderr)
		return 2
	}
	name := "fibril " + strings.Join(cmd.path, " ")
	err := cmd.run(ctx, rest, stdout, stderr)
	var uerr *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &uerr):
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", name, err, name)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitCode(err)
	}
}

// findCommand returns the command with the longest path that starts args,
// and the arguments after that path.
func findCommand(args []string) (command, []string, bool) {
	var best command
	found := false
	for _, c := range commands {
		n := len(c.path)
		if len(args) >= n && slices.Equal(args[:n], c.path) && (!found || n > len(best.path)) {
			best, found = c, true
		}
	}
	if !found {
		return command{}, nil, false
	}
	return best, args[len(best.path):], true
}

func printUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: fibril <command> [flags]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-16s %s\n", strings.Join(c.path, " "), c.summary)
	}
	fmt.Fprint(w, `
Connection flags (commands that talk to fibrild):
  --server ADDR   client protocol, for pub and sub (env FIBRIL_SERVER,
                  default 127.0.0.1:7420); a comma-separated list of a
                  cluster's nodes (ADDR,ADDR,...) is tried in turn
  --admin URL     admin HTTP API, for queue and settings (env FIBRIL_ADMIN,
                  default http://127.0.0.1:7421); https:// when fibrild
                  serves it with [admin] tls_cert
  --admin-ca FILE CA certificate (PEM) an https:// --admin is checked
                  against instead of the system's roots (env FIBRIL_ADMIN_CA)
  --token TOKEN   auth token (env FIBRIL_TOKEN)
  --json          JSON output for scripts, one object per line

Exit status:
  0  success
  1  failure (fibrild unreachable or refused, corruption found, ...)
  2  usage error (bad command, flag or argument)
  3  not found (no such queue, setting, directory)
  4  conflict (e.g. declaring a queue with the other mode)

Run 'fibril <command> --help' for a command's flags, 'fibril --version' for the version.
`)
}
