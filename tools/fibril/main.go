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
	{
		path:    []string{"log", "bench"},
		summary: "benchmark the segment log and the storage under it",
		run:     runLogBench,
	},
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
		return 0
	case errors.As(err, &uerr):
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", name, err, name)
		return 2
	default:
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
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
		fmt.Fprintf(w, "  %-14s %s\n", strings.Join(c.path, " "), c.summary)
	}
	fmt.Fprintf(w, "\nRun 'fibril <command> --help' for a command's flags, 'fibril --version' for the version.\n")
}
