package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/fibril-edge/fibril/tools/fibril/internal/benchutil"
	"github.com/fibril-edge/fibril/tools/fibril/internal/floor"
)

const doctorHelp = `Usage: fibril doctor [flags]

Measures the disk under fibrild's data directory and says what durable and
buffered queues will cost on it:
  - fdatasync latency: a durable publish is confirmed once an fdatasync
    covers it, so this is the least a durable confirm waits;
  - write cost: a buffered publish is confirmed once written to the
    operating system (page cache), so this is its disk cost;
  - group commit: 64 writers sharing fdatasyncs, what many concurrent
    durable publishers can reach together.
It writes scratch files in --dir and removes them; nothing else changes.
With --json it prints one JSON object.
`

// doctorReport is the --json output of "fibril doctor".
type doctorReport struct {
	Dir                 string   `json:"dir"`
	FS                  string   `json:"fs"`
	Payload             int      `json:"payload"`
	FdatasyncP50        float64  `json:"fdatasync_p50_us"`
	FdatasyncP99        float64  `json:"fdatasync_p99_us"`
	WriteP50            float64  `json:"write_p50_us"`
	WriteP99            float64  `json:"write_p99_us"`
	SerialDurablePerSec float64  `json:"serial_durable_per_sec"`
	GroupCommitWriters  int      `json:"group_commit_writers"`
	GroupCommitPerSec   float64  `json:"group_commit_per_sec"`
	AppendsPerSync      float64  `json:"appends_per_sync"`
	Warnings            []string `json:"warnings"`
}

// runDoctor is "fibril doctor".
func runDoctor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := pflag.NewFlagSet("fibril doctor", pflag.ContinueOnError)
	dir := flags.String("dir", envOr("FIBRIL_DATA_DIR", "./data"), "fibrild's data directory, or any directory on the same disk (env FIBRIL_DATA_DIR)")
	samples := flags.Int("samples", 200, "fdatasyncs and writes to time")
	payload := flags.Int("payload", 1024, "bytes per append")
	records := flags.Int("records", 5000, "records for the group commit run")
	asJSON := flags.Bool("json", false, "print one JSON object")
	if done, err := parseFlags(flags, doctorHelp, args, stdout); done || err != nil {
		return err
	}
	if err := wantArgs(flags, 0, 0, ""); err != nil {
		return err
	}
	if *samples < 1 || *payload < 1 || *records < 1 {
		return usagef("--samples, --payload and --records must be at least 1")
	}
	if info, err := os.Stat(*dir); err != nil || !info.IsDir() {
		return withExit(exitNotFound, fmt.Errorf("%s is not a directory: pass fibrild's data directory (storage.data_dir) with --dir", *dir))
	}
	rep := doctorReport{Dir: *dir, FS: benchutil.DetectEnv(*dir).FS, Payload: *payload, GroupCommitWriters: groupCommitWriters}

	fmt.Fprintf(stderr, "measuring %d fdatasyncs in %s ...\n", *samples, *dir)
	syncs, err := floor.FdatasyncLatencies(*dir, *samples, *payload)
	if err != nil {
		return fmt.Errorf("measure fdatasync in %s: %w", *dir, err)
	}
	s := benchutil.Summarize(syncs)
	rep.FdatasyncP50, rep.FdatasyncP99 = benchutil.Micros(s.P50), benchutil.Micros(s.P99)
	if s.P50 > 0 {
		rep.SerialDurablePerSec = float64(time.Second) / float64(s.P50)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	writes, err := floor.WriteLatencies(*dir, *samples*10, *payload)
	if err != nil {
		return fmt.Errorf("measure writes in %s: %w", *dir, err)
	}
	w := benchutil.Summarize(writes)
	rep.WriteP50, rep.WriteP99 = benchutil.Micros(w.P50), benchutil.Micros(w.P99)

	fmt.Fprintf(stderr, "measuring group commit, %d writers, %d records ...\n", groupCommitWriters, *records)
	gc, err := floor.RunGroupCommit(ctx, *dir, groupCommitWriters, *records, *payload)
	if err != nil {
		return fmt.Errorf("measure group commit in %s: %w", *dir, err)
	}
	rep.GroupCommitPerSec = benchutil.PerSecond(gc.Records, gc.Elapsed)
	if gc.Syncs > 0 {
		rep.AppendsPerSync = float64(gc.Records) / float64(gc.Syncs)
	}
	rep.Warnings = doctorWarnings(rep)
	if *asJSON {
		return writeJSON(stdout, rep)
	}
	return printDoctor(stdout, rep)
}

// doctorWarnings says what is unusual about the measurements.
func doctorWarnings(r doctorReport) []string {
	warns := []string{}
	switch r.FS {
	case "tmpfs", "ramfs":
		warns = append(warns, fmt.Sprintf("%s is %s: memory, not disk. Nothing survives a reboot; durable means nothing here.", r.Dir, r.FS))
	case "nfs", "fuse", "9p", "overlayfs":
		warns = append(warns, fmt.Sprintf("%s is on %s: fdatasync may not reach stable storage, or may be slow; prefer a local disk.", r.Dir, r.FS))
	}
	if r.FdatasyncP50 < 20 && r.FS != "tmpfs" && r.FS != "ramfs" {
		warns = append(warns, "fdatasync takes under 20 µs: either the disk has a power-loss-protected cache, or it (or a virtual machine under it) acknowledges flushes it has not done. If the latter, durable queues are only as safe as buffered ones.")
	}
	if r.FdatasyncP50 > 5000 {
		warns = append(warns, "fdatasync takes over 5 ms (a spinning disk, SD card or network storage): durable publishers should publish concurrently or in batches, or use buffered queues where a power loss may drop the last moments.")
	}
	if r.FdatasyncP99 > 10*r.FdatasyncP50 && r.FdatasyncP99 > 1000 {
		warns = append(warns, fmt.Sprintf("fdatasync's p99 (%s) is over ten times its median: expect occasional slow durable confirms.", humanMicros(r.FdatasyncP99)))
	}
	return warns
}

func printDoctor(w io.Writer, r doctorReport) error {
	fmt.Fprintf(w, "Disk under %s (%s), %d-byte appends:\n", r.Dir, r.FS, r.Payload)
	fmt.Fprintf(w, "  fdatasync:               median %s, p99 %s\n", humanMicros(r.FdatasyncP50), humanMicros(r.FdatasyncP99))
	fmt.Fprintf(w, "  write to the page cache: median %s, p99 %s\n", humanMicros(r.WriteP50), humanMicros(r.WriteP99))
	fmt.Fprintf(w, "  group commit:            %.0f appends/s with %d writers, %.1f appends per fdatasync\n\n",
		r.GroupCommitPerSec, r.GroupCommitWriters, r.AppendsPerSync)

	fmt.Fprintf(w, "Durable queues: a publish is confirmed once an fdatasync covers it, so it waits for\n")
	fmt.Fprintf(w, "  one fdatasync: about %s here (p99 %s). One publisher that waits for each\n", humanMicros(r.FdatasyncP50), humanMicros(r.FdatasyncP99))
	fmt.Fprintf(w, "  confirm gets about %.0f/s; with %d concurrent publishers sharing fdatasyncs,\n", r.SerialDurablePerSec, r.GroupCommitWriters)
	fmt.Fprintf(w, "  about %.0f/s (disk only; the broker adds its own work).\n", r.GroupCommitPerSec)
	fmt.Fprintf(w, "Buffered queues: a publish is confirmed once written to the operating system:\n")
	fmt.Fprintf(w, "  about %s of disk work here, so the disk is rarely the limit. The price: a power\n", humanMicros(r.WriteP50))
	fmt.Fprintf(w, "  loss (not a crash of fibrild) loses what was confirmed since the last background\n")
	fmt.Fprintf(w, "  sync, which runs every storage.background_sync_interval_ms (default 100 ms) and\n")
	fmt.Fprintf(w, "  itself takes about one fdatasync (%s).\n", humanMicros(r.FdatasyncP50))
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "\nWarning: %s\n", warn)
	}
	return nil
}

// humanMicros prints microseconds as µs, or as ms from 0.1 ms up.
func humanMicros(us float64) string {
	if us >= 100 {
		return fmt.Sprintf("%.2f ms", us/1000)
	}
	return fmt.Sprintf("%.1f µs", us)
}
