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
	{path: []string{"queue", "purge"}, summary: "discard a queue's ready messages (admin API)", run: runQueuePurge},
	{path: []string{"queue", "mode"}, summary: "change a queue's durability mode, fenced (admin API)", run: runQueueMode},
	{path: []string{"context", "add"}, summary: "save named connection settings (server, admin, token)", run: runContextAdd},
	{path: []string{"context", "use"}, summary: "select the context every command connects with", run: runContextUse},
	{path: []string{"context", "ls"}, summary: "list the contexts, the selected one marked", run: runContextLs},
	{path: []string{"context", "rm"}, summary: "remove a context", run: runContextRm},
	{path: []string{"settings", "get"}, summary: "show runtime settings (admin API)", run: runSettingsGet},
	{path: []string{"settings", "set"}, summary: "change runtime settings (admin API)", run: runSettingsSet},
	{path: []string{"cluster", "status"}, summary: "show members, leader and placement (admin API)", run: runClusterStatus},
	{path: []string{"cluster", "join"}, summary: "join this node to a cluster through a peer (admin API)", run: runClusterJoin},
	{path: []string{"cluster", "certs"}, summary: "make the CA and node certificates that secure the cluster port", run: runClusterCerts},
	{path: []string{"uplink", "status"}, summary: "show each uplink's link, backlog and counters (admin API)", run: runUplinkStatus},
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
	lead, args := leadingFlags(args)
	if len(args) > 0 && args[0] == completeQueuesCommand {
		return completeQueues(ctx, append(args[1:], lead...), stdout)
	}
	if len(args) == 1 && args[0] == manCommand {
		return runMan(stdout)
	}
	if len(args) > 0 && args[0] == "help" {
		args = append(args[1:], "--help")
	}
	cmd, rest, ok := findCommand(args)
	if !ok {
		if len(args) > 0 && isGroup(args[0]) {
			if len(args) == 2 && (args[1] == "--help" || args[1] == "-h") {
				printGroupUsage(stdout, args[0])
				return exitOK
			}
			if len(args) == 1 {
				printGroupUsage(stderr, args[0])
				return exitUsage
			}
		}
		if len(args) == 1 && (args[0] == "--help" || args[0] == "-h") {
			printUsage(stdout)
			return exitOK
		}
		if len(args) > 0 {
			fmt.Fprintf(stderr, "fibril: unknown command %q\n\n", strings.Join(args, " "))
		}
		printUsage(stderr)
		return exitUsage
	}
	rest = append(rest, lead...)
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

// valueFlags are the connection flags that take a value: given before
// the command, their value is the next argument unless written with "=".
var valueFlags = map[string]bool{"--server": true, "-s": true, "--admin": true, "--admin-ca": true, "--token": true}

// leadingFlags splits the flags written before the command's words
// ("fibril -s HOST:7420 pub q") from the rest; the command parses them
// after its own arguments, as if written last.
func leadingFlags(args []string) (lead, rest []string) {
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && args[0] != "-" {
		switch a := args[0]; {
		case a == "--help" || a == "-h" || a == "--version":
			return lead, args
		case valueFlags[a] && len(args) > 1:
			lead, args = append(lead, a, args[1]), args[2:]
		default:
			lead, args = append(lead, a), args[1:]
		}
	}
	return lead, args
}

// isGroup reports whether word starts commands of more than one word
// ("queue", "cluster"): a group, with a help of its own.
func isGroup(word string) bool {
	for _, c := range commands {
		if len(c.path) > 1 && c.path[0] == word {
			return true
		}
	}
	return false
}

// printGroupUsage lists the commands of group.
func printGroupUsage(w io.Writer, group string) {
	fmt.Fprintf(w, "Usage: fibril %s <command> [flags]\n\nCommands:\n", group)
	for _, c := range commands {
		if c.path[0] == group {
			fmt.Fprintf(w, "  %-16s %s\n", strings.Join(c.path, " "), c.summary)
		}
	}
	fmt.Fprintf(w, "\nRun 'fibril %s <command> --help' for a command's flags, 'fibril --help' for the connection flags.\n", group)
}

func printUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: fibril <command> [flags]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-16s %s\n", strings.Join(c.path, " "), c.summary)
	}
	fmt.Fprint(w, `
Connection flags (commands that talk to fibrild):
  -s, --server ADDR
                  client protocol, for pub and sub (env FIBRIL_SERVER,
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

Connection flags may come before the command or after it. Their defaults
come from the environment, else from the selected context (fibril context
use NAME, or FIBRIL_CONTEXT); without an admin URL from either, the admin
API is looked for on the server's host, port 7421.
Run 'fibril <command> --help' for a command's flags, 'fibril --version' for the version.
`)
}
