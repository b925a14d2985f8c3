package main

import (
	"context"
	"fmt"
	"io"

	"github.com/fibril-edge/fibril/tools/fibril/internal/benchutil"
	"github.com/fibril-edge/fibril/tools/fibril/internal/floor"
)

// groupCommitWriters is the concurrency of the floor's group commit; the
// JSON field name carries it.
const groupCommitWriters = 64

// floorResult is the JSON line printed by --floor.
type floorResult struct {
	Kind                string  `json:"kind"`
	Samples             int     `json:"samples"`
	Payload             int     `json:"payload"`
	WriteP50            float64 `json:"write_p50_us"`
	WriteP99            float64 `json:"write_p99_us"`
	FdatasyncP50        float64 `json:"fdatasync_p50_us"`
	FdatasyncP99        float64 `json:"fdatasync_p99_us"`
	GroupCommitRecords  int     `json:"group_commit_records"`
	GroupCommitSyncs    uint64  `json:"group_commit_syncs"`
	GroupCommit64PerSec float64 `json:"group_commit_64_per_sec"`
	benchutil.Env
}

// runFloor measures the storage under base without the log and prints one
// line.
func runFloor(ctx context.Context, cfg *benchConfig, base string, env benchutil.Env, stdout, stderr io.Writer) (err error) {
	dir, cleanup, err := scratchDir(base, "floor-")
	if err != nil {
		return err
	}
	defer func() {
		if cerr := cleanup(); cerr != nil && err == nil {
			err = cerr
		}
	}()

	fmt.Fprintf(stderr, "floor: %d writes of %d bytes ... ", cfg.floorSamples, cfg.payload)
	writes, err := floor.WriteLatencies(dir, cfg.floorSamples, cfg.payload)
	if err != nil {
		return fmt.Errorf("write latency: %w", err)
	}
	w := benchutil.Summarize(writes)
	fmt.Fprintf(stderr, "p50=%.1fus p99=%.1fus\n", benchutil.Micros(w.P50), benchutil.Micros(w.P99))

	if err := ctx.Err(); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "floor: %d appends with fdatasync ... ", cfg.floorSamples)
	syncs, err := floor.FdatasyncLatencies(dir, cfg.floorSamples, cfg.payload)
	if err != nil {
		return fmt.Errorf("fdatasync latency: %w", err)
	}
	s := benchutil.Summarize(syncs)
	fmt.Fprintf(stderr, "p50=%.1fus p99=%.1fus\n", benchutil.Micros(s.P50), benchutil.Micros(s.P99))

	fmt.Fprintf(stderr, "floor: group commit, %d goroutines, %d records ... ", groupCommitWriters, cfg.records)
	gc, err := floor.RunGroupCommit(ctx, dir, groupCommitWriters, cfg.records, cfg.payload)
	if err != nil {
		return fmt.Errorf("group commit: %w", err)
	}
	gcRate := benchutil.PerSecond(gc.Records, gc.Elapsed)
	fmt.Fprintf(stderr, "%.0f rec/s in %d fdatasyncs\n", gcRate, gc.Syncs)

	return benchutil.WriteJSONLine(stdout, floorResult{
		Kind:                "floor",
		Samples:             cfg.floorSamples,
		Payload:             cfg.payload,
		WriteP50:            benchutil.Micros(w.P50),
		WriteP99:            benchutil.Micros(w.P99),
		FdatasyncP50:        benchutil.Micros(s.P50),
		FdatasyncP99:        benchutil.Micros(s.P99),
		GroupCommitRecords:  gc.Records,
		GroupCommitSyncs:    gc.Syncs,
		GroupCommit64PerSec: gcRate,
		Env:                 env,
	})
}
