package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/tools/internal/daemon"
)

const recoverHelp = `Usage: fibril recover DIR [--discard]

Repairs a data directory whose queue logs outlived their declarations: the
metadata store (DIR/meta) was lost or replaced, and fibrild refuses to
start, naming the queues whose logs no declaration names. fibrild must be
stopped: recover takes the directory's lock.

Each such queue is declared again with the settings recorded beside its
logs (DIR/queues/NAME/QUEUE). A queue without that file (logs from before
it existed) is declared durable, with as many partitions as it has logs,
the other settings at their defaults: check them with fibril queue info.
Its messages come back from the logs at the next start: acks recorded in
the log hold, so at most the messages settled just before the loss are
delivered again.

With --discard the queues are removed instead, with their messages.

One line per queue says what was done. Exit status 0 when there was
nothing to do or everything was done.
`

// runRecover is "fibril recover".
func runRecover(_ context.Context, args []string, stdout, _ io.Writer) error {
	flags := pflag.NewFlagSet("fibril recover", pflag.ContinueOnError)
	discard := flags.Bool("discard", false, "remove the queues and their messages instead of declaring them again")
	if done, err := parseFlags(flags, recoverHelp, args, stdout); done || err != nil {
		return err
	}
	if err := wantArgs(flags, 1, 1, "DIR"); err != nil {
		return err
	}
	dir := flags.Arg(0)
	unlock, err := daemon.LockDataDir(dir)
	if err != nil {
		return fmt.Errorf("recover %s: %w (stop fibrild first)", dir, err)
	}
	defer unlock()
	got, err := appliance.RecoverDeclarations(appliance.Options{DataDir: dir, Logger: slog.New(slog.DiscardHandler)}, *discard)
	for _, r := range got {
		switch {
		case r.Discarded:
			fmt.Fprintf(stdout, "%s: removed with its messages\n", r.Name)
		case r.Inferred:
			fmt.Fprintf(stdout, "%s: declared again from its logs (no QUEUE file): %s, %d partitions, other settings at their defaults\n",
				r.Name, r.Config.Durability, r.Config.Partitions)
		default:
			fmt.Fprintf(stdout, "%s: declared again as it was: %s, %d partitions\n", r.Name, r.Config.Durability, r.Config.Partitions)
		}
	}
	if err != nil {
		return fmt.Errorf("recover %s: %w", dir, err)
	}
	if len(got) == 0 {
		fmt.Fprintf(stdout, "nothing to recover: every queue log in %s has its declaration\n", dir)
	}
	return nil
}
