package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/fibril-edge/fibril/tools/fibril/internal/benchutil"
	"github.com/fibril-edge/fibril/wal"
)

// benchConfig is the parsed command line of "fibril log bench".
type benchConfig struct {
	dir           string
	policies      []string
	batches       []int
	concurrency   []int
	records       int
	warmup        int
	payload       int
	prealloc      wal.Prealloc
	preallocAhead benchutil.ByteSize // 0: the log's default (the rest of the segment)
	tailCache     benchutil.ByteSize // -1: the log's default
	matrix        bool
	floor         bool
	floorSamples  int
	recovery      bool
	recoveryBytes benchutil.ByteSize
	recoveryEvict bool
}

const logBenchHelp = `Usage: fibril log bench [flags]

Benchmarks the segment log (package wal) on the file system that holds --dir.
Results go to stdout as one JSON object per line; progress goes to stderr.

The case matrix (the default) runs every combination of --policy, --batch and
--concurrency. Each case opens a fresh log in its own directory (64 MiB
segments, 4 KiB index spacing, --prealloc), has --concurrency goroutines
append --warmup records (not timed) and syncs, then appends --records
records, timing every Append call (one call carries --batch records), and
ends with a Sync: throughput runs from the first measured append to the end
of that Sync, so a policy that leaves data in the page cache pays for it.

Policies:
  none       AfterFlush appends; background sync off (no timer, no byte bound)
  periodic   AfterFlush appends; background sync every 250ms (byte bound at
             the log's default)
  on_commit  AfterFsync appends: a call returns once an fdatasync covers it

Each case line has kind "case", policy, batch, concurrency, records,
records_per_sec, p50_us, p99_us and p999_us (latency of one Append call,
nearest rank, microseconds), syncs (fdatasyncs in the measured phase,
including the final Sync), append_seconds and final_sync_seconds (the
measured time split into the appends and the closing Sync), samples (Append
calls timed), payload, prealloc, and the environment: kernel, fs, cpus, go.

--floor measures the storage without the log, in the same directory:
  write_p50_us, write_p99_us          one --payload-byte os.File.Write appended
                                      to a file, --floor-samples times
  fdatasync_p50_us, fdatasync_p99_us  an fdatasync after each such append
  group_commit_64_per_sec             records/s of a plain group commit: 64
                                      goroutines append --records records to
                                      one file; whoever holds the lock writes
                                      all pending records and fdatasyncs once
and prints one line with kind "floor".

--recovery fills the active segment of a log with --recovery-bytes of
--payload-byte records (batches of 256, AfterFlush, background sync off;
segment size 10% larger), syncs and closes it, then times wal.Open, and
prints one line with kind "recovery": segment_bytes, open_seconds,
close_seconds, gib_per_sec.

--floor and --recovery replace the matrix; add --matrix to run it as well.

Flags:
`

const logBenchExamples = `
Examples:
  fibril log bench
  fibril log bench --dir /mnt/nvme/bench --policy on_commit --concurrency 1,64
  fibril log bench --floor --matrix --dir /mnt/nvme/bench
  fibril log bench --recovery --recovery-bytes 256MiB
`

// parseLogBenchFlags parses args. It returns (nil, nil) when help was
// printed.
func parseLogBenchFlags(args []string, stdout io.Writer) (*benchConfig, error) {
	cfg := &benchConfig{recoveryBytes: 1 << 30, tailCache: -1}
	var prealloc string
	fs := pflag.NewFlagSet("fibril log bench", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&cfg.dir, "dir", "", "directory for all bench files (default: a temporary directory under the current one, removed afterwards)")
	fs.StringSliceVar(&cfg.policies, "policy", []string{"none", "periodic", "on_commit"}, "durability policies to run: none, periodic, on_commit")
	fs.IntSliceVar(&cfg.batches, "batch", []int{1, 16}, "records per Append call")
	fs.IntSliceVar(&cfg.concurrency, "concurrency", []int{1, 8, 64}, "goroutines appending at once")
	fs.IntVar(&cfg.records, "records", 8000, "measured records per case, split among the goroutines (also the group commit's records with --floor)")
	fs.IntVar(&cfg.warmup, "warmup", 2000, "warm-up records per case, appended and synced before measuring")
	fs.IntVar(&cfg.payload, "payload", 128, "payload bytes per record")
	fs.StringVar(&prealloc, "prealloc", "default", "segment preallocation: default, keep-size, extend or off")
	fs.Var(&cfg.preallocAhead, "prealloc-ahead", "space a segment in use reserves ahead of the writer at once (e.g. 4MiB; default: the rest of the segment)")
	fs.Var(&cfg.tailCache, "tail-cache", "tail cache budget per log (e.g. 8MiB; 0 turns it off; default: the log's default)")
	fs.BoolVar(&cfg.matrix, "matrix", false, "run the case matrix even when --floor or --recovery is given")
	fs.BoolVar(&cfg.floor, "floor", false, "measure raw write, fdatasync and plain group commit instead of the matrix")
	fs.IntVar(&cfg.floorSamples, "floor-samples", 2000, "write and fdatasync samples for --floor")
	fs.BoolVar(&cfg.recovery, "recovery", false, "time opening a log whose active segment holds --recovery-bytes")
	fs.Var(&cfg.recoveryBytes, "recovery-bytes", "bytes of records in the active segment for --recovery (e.g. 4MiB, 1GiB)")
	fs.BoolVar(&cfg.recoveryEvict, "recovery-evict", false, "drop the segment from the page cache before timing the open (Linux)")

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprint(stdout, logBenchHelp+fs.FlagUsagesWrapped(100)+logBenchExamples)
			return nil, nil
		}
		return nil, usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	p, err := wal.ParsePrealloc(prealloc)
	if err != nil {
		return nil, usagef("--prealloc: %v", err)
	}
	cfg.prealloc = p
	if !cfg.floor && !cfg.recovery {
		cfg.matrix = true
	}
	return cfg, cfg.validate()
}

func (c *benchConfig) validate() error {
	for _, name := range c.policies {
		if _, ok := policyByName(name); !ok {
			return usagef("--policy: unknown policy %q (want none, periodic or on_commit)", name)
		}
	}
	for _, b := range c.batches {
		if b < 1 {
			return usagef("--batch: %d is not a positive number of records", b)
		}
	}
	for _, n := range c.concurrency {
		if n < 1 {
			return usagef("--concurrency: %d is not a positive number of goroutines", n)
		}
	}
	switch {
	case c.matrix && (len(c.policies) == 0 || len(c.batches) == 0 || len(c.concurrency) == 0):
		return usagef("--policy, --batch and --concurrency each need at least one value")
	case c.records < 1:
		return usagef("--records must be at least 1")
	case c.warmup < 0:
		return usagef("--warmup must not be negative")
	case c.payload < 1:
		return usagef("--payload must be at least 1 byte")
	case c.floorSamples < 1:
		return usagef("--floor-samples must be at least 1")
	case c.recovery && int64(c.recoveryBytes) < int64(c.payload):
		return usagef("--recovery-bytes must hold at least one record")
	}
	return nil
}

// runLogBench is the entry point of "fibril log bench".
func runLogBench(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	cfg, err := parseLogBenchFlags(args, stdout)
	if cfg == nil || err != nil {
		return err
	}
	base, cleanup, err := benchDir(cfg.dir)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := cleanup(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	env := benchutil.DetectEnv(base)
	fmt.Fprintf(stderr, "bench dir %s (fs %s, kernel %s, %d cpus, %s)\n", base, env.FS, env.Kernel, env.CPUs, env.Go)

	if cfg.floor {
		if err := runFloor(ctx, cfg, base, env, stdout, stderr); err != nil {
			return fmt.Errorf("floor: %w", err)
		}
	}
	if cfg.matrix {
		if err := runMatrix(ctx, cfg, base, env, stdout, stderr); err != nil {
			return err
		}
	}
	if cfg.recovery {
		if err := runRecovery(ctx, cfg, base, env, stdout, stderr); err != nil {
			return fmt.Errorf("recovery: %w", err)
		}
	}
	return nil
}

// benchDir returns the directory to run in and how to clean it up. Without
// --dir it makes a temporary directory under the current one and removes it
// afterwards; a --dir is created if needed and left in place (each run
// removes its own subdirectories).
func benchDir(dir string) (string, func() error, error) {
	if dir == "" {
		tmp, err := os.MkdirTemp(".", "fibril-bench-")
		if err != nil {
			return "", nil, fmt.Errorf("create bench directory: %w", err)
		}
		return tmp, func() error {
			if err := os.RemoveAll(tmp); err != nil {
				return fmt.Errorf("remove bench directory: %w", err)
			}
			return nil
		}, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, fmt.Errorf("create bench directory: %w", err)
	}
	return dir, func() error { return nil }, nil
}

// scratchDir makes a fresh subdirectory of base and returns it with a
// function that removes it.
func scratchDir(base, prefix string) (string, func() error, error) {
	dir, err := os.MkdirTemp(base, prefix)
	if err != nil {
		return "", nil, fmt.Errorf("create %s directory: %w", prefix, err)
	}
	return dir, func() error {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove %s: %w", dir, err)
		}
		return nil
	}, nil
}
