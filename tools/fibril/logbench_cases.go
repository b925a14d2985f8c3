package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibril-edge/fibril/tools/fibril/internal/benchutil"
	"github.com/fibril-edge/fibril/wal"
)

// policy is a durability policy: how appends complete and how the log
// syncs in the background.
type policy struct {
	name       string
	durability wal.Boundary
	interval   time.Duration // wal.Options.BackgroundSyncInterval
	syncBytes  int64         // wal.Options.SyncBytesThreshold
}

var policies = []policy{
	{name: "none", durability: wal.AfterFlush, interval: -1, syncBytes: -1},
	{name: "periodic", durability: wal.AfterFlush, interval: 250 * time.Millisecond},
	{name: "on_commit", durability: wal.AfterFsync},
}

func policyByName(name string) (policy, bool) {
	for _, p := range policies {
		if p.name == name {
			return p, true
		}
	}
	return policy{}, false
}

// benchCase is one cell of the matrix.
type benchCase struct {
	policy      policy
	batch       int
	concurrency int
}

// caseResult is the JSON line printed for one case.
type caseResult struct {
	Kind          string  `json:"kind"`
	Policy        string  `json:"policy"`
	Batch         int     `json:"batch"`
	Concurrency   int     `json:"concurrency"`
	Records       int     `json:"records"`
	RecordsPerSec float64 `json:"records_per_sec"`
	P50           float64 `json:"p50_us"`
	P99           float64 `json:"p99_us"`
	P999          float64 `json:"p999_us"`
	Syncs         uint64  `json:"syncs"`
	// AppendSeconds and FinalSyncSeconds split the measured time: the
	// appends themselves, and the closing sync that throughput includes.
	AppendSeconds    float64 `json:"append_seconds"`
	FinalSyncSeconds float64 `json:"final_sync_seconds"`
	Samples          int     `json:"samples"`
	Payload          int     `json:"payload"`
	Prealloc         string  `json:"prealloc"`
	PreallocAhead    int64   `json:"prealloc_ahead,omitempty"`
	benchutil.Env
}

// Log layout for every case.
const (
	caseSegmentSize  = 64 << 20
	caseIndexSpacing = 4 << 10
)

// cases expands the configured policies, batches and concurrencies.
func (c *benchConfig) cases() []benchCase {
	var out []benchCase
	for _, name := range c.policies {
		p, _ := policyByName(name) // validated
		for _, b := range c.batches {
			for _, n := range c.concurrency {
				out = append(out, benchCase{policy: p, batch: b, concurrency: n})
			}
		}
	}
	return out
}

// runMatrix runs every case, each in a fresh directory under base, and
// prints a line for each.
func runMatrix(ctx context.Context, cfg *benchConfig, base string, env benchutil.Env, stdout, stderr io.Writer) error {
	cases := cfg.cases()
	for i, c := range cases {
		fmt.Fprintf(stderr, "case %d/%d %s batch=%d conc=%d ... ", i+1, len(cases), c.policy.name, c.batch, c.concurrency)
		res, err := runCaseInScratch(ctx, cfg, c, base)
		if err != nil {
			fmt.Fprintln(stderr, "failed")
			return fmt.Errorf("case %s batch=%d conc=%d: %w", c.policy.name, c.batch, c.concurrency, err)
		}
		fmt.Fprintf(stderr, "%.0f rec/s p50=%.1fus p99=%.1fus p999=%.1fus syncs=%d\n",
			res.RecordsPerSec, res.P50, res.P99, res.P999, res.Syncs)
		res.Env = env
		if err := benchutil.WriteJSONLine(stdout, res); err != nil {
			return err
		}
	}
	return nil
}

func runCaseInScratch(ctx context.Context, cfg *benchConfig, c benchCase, base string) (_ caseResult, err error) {
	prefix := fmt.Sprintf("case-%s-b%d-c%d-", c.policy.name, c.batch, c.concurrency)
	dir, cleanup, err := scratchDir(base, prefix)
	if err != nil {
		return caseResult{}, err
	}
	defer func() {
		if cerr := cleanup(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	return runCase(ctx, cfg, c, dir)
}

// runCase opens a log in dir, warms it up, and measures one case.
func runCase(ctx context.Context, cfg *benchConfig, c benchCase, dir string) (_ caseResult, err error) {
	l, err := wal.Open(dir, wal.Options{
		SegmentSize:            caseSegmentSize,
		IndexSpacing:           caseIndexSpacing,
		Preallocate:            cfg.prealloc,
		PreallocAhead:          int64(cfg.preallocAhead),
		BackgroundSyncInterval: c.policy.interval,
		SyncBytesThreshold:     c.policy.syncBytes,
		TailCacheBytes:         tailCacheOption(cfg.tailCache),
	})
	if err != nil {
		return caseResult{}, fmt.Errorf("open log: %w", err)
	}
	defer func() {
		if cerr := l.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close log: %w", cerr)
		}
	}()

	if cfg.warmup > 0 {
		if _, err := appendRecords(ctx, l, c, cfg.warmup, cfg.payload); err != nil {
			return caseResult{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	// Start the measured phase with nothing left unsynced by the warm-up.
	if err := l.Sync(ctx); err != nil {
		return caseResult{}, fmt.Errorf("sync after warm-up: %w", err)
	}

	syncsBefore := l.Status().Syncs
	start := time.Now()
	samples, err := appendRecords(ctx, l, c, cfg.records, cfg.payload)
	if err != nil {
		return caseResult{}, fmt.Errorf("measured appends: %w", err)
	}
	appended := time.Since(start)
	if err := l.Sync(ctx); err != nil {
		return caseResult{}, fmt.Errorf("final sync: %w", err)
	}
	elapsed := time.Since(start)
	syncs := l.Status().Syncs - syncsBefore

	lat := benchutil.Summarize(samples)
	return caseResult{
		Kind:             "case",
		Policy:           c.policy.name,
		Batch:            c.batch,
		Concurrency:      c.concurrency,
		Records:          cfg.records,
		RecordsPerSec:    benchutil.PerSecond(cfg.records, elapsed),
		P50:              benchutil.Micros(lat.P50),
		P99:              benchutil.Micros(lat.P99),
		P999:             benchutil.Micros(lat.P999),
		Syncs:            syncs,
		AppendSeconds:    appended.Seconds(),
		FinalSyncSeconds: (elapsed - appended).Seconds(),
		Samples:          lat.N,
		Payload:          cfg.payload,
		Prealloc:         cfg.prealloc.String(),
		PreallocAhead:    int64(cfg.preallocAhead),
	}, nil
}

// appendRecords has c.concurrency goroutines append records records of
// payload bytes between them, c.batch per Append call (the last call may
// carry fewer), and returns the latency of every call. The goroutines take
// calls from a shared counter, so the split stays even when one is slow.
func appendRecords(ctx context.Context, l *wal.Log, c benchCase, records, payload int) ([]time.Duration, error) {
	calls := int64((records + c.batch - 1) / c.batch)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	var next atomic.Int64
	var wg sync.WaitGroup
	perWorker := make([][]time.Duration, c.concurrency)
	for w := range c.concurrency {
		wg.Go(func() {
			entries := makeEntries(c.batch, payload)
			samples := make([]time.Duration, 0, calls/int64(c.concurrency)+1)
			for i := next.Add(1) - 1; i < calls; i = next.Add(1) - 1 {
				n := min(c.batch, records-int(i)*c.batch)
				start := time.Now()
				if _, err := l.Append(ctx, entries[:n], c.policy.durability); err != nil {
					cancel(fmt.Errorf("append: %w", err))
					return
				}
				samples = append(samples, time.Since(start))
			}
			perWorker[w] = samples
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}

	all := make([]time.Duration, 0, calls)
	for _, s := range perWorker {
		all = append(all, s...)
	}
	return all, nil
}

// makeEntries returns batch entries of random payload bytes, each with its
// own slice of one buffer.
func makeEntries(batch, payload int) []wal.Entry {
	buf := make([]byte, batch*payload)
	_, _ = rand.Read(buf) // crypto/rand.Read never fails
	entries := make([]wal.Entry, batch)
	for i := range entries {
		entries[i] = wal.Entry{Type: 1, Payload: buf[i*payload : (i+1)*payload]}
	}
	return entries
}

// tailCacheOption maps --tail-cache to the log's option: -1 keeps the
// default, 0 turns the cache off.
func tailCacheOption(s benchutil.ByteSize) int64 {
	switch {
	case s < 0:
		return 0
	case s == 0:
		return -1
	}
	return int64(s)
}
