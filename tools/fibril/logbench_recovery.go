package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"time"

	"github.com/fibril-edge/fibril/tools/fibril/internal/benchutil"
	"github.com/fibril-edge/fibril/wal"
)

// recoveryBatch is how many records each Append carries while the
// recovery log is being filled.
const recoveryBatch = 256

// calibrationRecords is how many records each calibration step appends.
const calibrationRecords = 64

// recoveryResult is the JSON line printed by --recovery.
type recoveryResult struct {
	Kind         string  `json:"kind"`
	SegmentBytes int64   `json:"segment_bytes"`
	SegmentSize  int64   `json:"segment_size"`
	Records      int64   `json:"records"`
	Payload      int     `json:"payload"`
	Prealloc     string  `json:"prealloc"`
	PageCache    string  `json:"page_cache"` // "warm" or "evicted"
	OpenSeconds  float64 `json:"open_seconds"`
	CloseSeconds float64 `json:"close_seconds"`
	GiBPerSec    float64 `json:"gib_per_sec"`
	benchutil.Env
}

// runRecovery builds a log whose active segment holds --recovery-bytes,
// times reopening it, and prints one line.
func runRecovery(ctx context.Context, cfg *benchConfig, base string, env benchutil.Env, stdout, stderr io.Writer) (err error) {
	dir, cleanup, err := scratchDir(base, "recovery-")
	if err != nil {
		return err
	}
	defer func() {
		if cerr := cleanup(); cerr != nil && err == nil {
			err = cerr
		}
	}()

	perRecord, fixed, err := calibrateRecordSize(ctx, filepath.Join(dir, "calibrate"), cfg.payload)
	if err != nil {
		return fmt.Errorf("calibrate record size: %w", err)
	}
	target := int64(cfg.recoveryBytes)
	records := max(1, ceilDiv(target-fixed, perRecord))
	opts := wal.Options{
		// 10% headroom keeps every record in the one active segment.
		SegmentSize:            max(roundUp(target+target/10, 4<<10), 1<<20),
		IndexSpacing:           caseIndexSpacing,
		Preallocate:            cfg.prealloc,
		BackgroundSyncInterval: -1,
		SyncBytesThreshold:     -1,
	}
	logDir := filepath.Join(dir, "log")

	fmt.Fprintf(stderr, "recovery: writing %d records of %d bytes (segment size %d) ... ", records, cfg.payload, opts.SegmentSize)
	start := time.Now()
	written, err := fillLog(ctx, logDir, opts, records, cfg.payload)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%.1fs\n", time.Since(start).Seconds())

	pageCache := "warm"
	if cfg.recoveryEvict {
		if err := benchutil.EvictPageCache(logDir); err != nil {
			return err
		}
		pageCache = "evicted"
	}

	fmt.Fprintf(stderr, "recovery: opening (%s page cache) ... ", pageCache)
	start = time.Now()
	l, err := wal.Open(logDir, opts)
	if err != nil {
		return fmt.Errorf("timed open: %w", err)
	}
	openDur := time.Since(start)
	report, next := l.Recovery(), l.WrittenNext()
	start = time.Now()
	if err := l.Close(); err != nil {
		return fmt.Errorf("close after timed open: %w", err)
	}
	closeDur := time.Since(start)

	if report.Segments != 1 {
		return fmt.Errorf("log spans %d segments, want 1 (segment size %d too small)", report.Segments, opts.SegmentSize)
	}
	if next != written {
		return fmt.Errorf("reopened log ends at %d, but %d was written", next, written)
	}
	gibPerSec := math.Round(float64(report.ScannedBytes)/(1<<30)/openDur.Seconds()*1000) / 1000
	fmt.Fprintf(stderr, "%.3fs for %d bytes (%.2f GiB/s)\n", openDur.Seconds(), report.ScannedBytes, gibPerSec)

	return benchutil.WriteJSONLine(stdout, recoveryResult{
		Kind:         "recovery",
		SegmentBytes: report.ScannedBytes,
		SegmentSize:  opts.SegmentSize,
		Records:      records,
		Payload:      cfg.payload,
		Prealloc:     cfg.prealloc.String(),
		PageCache:    pageCache,
		OpenSeconds:  openDur.Seconds(),
		CloseSeconds: closeDur.Seconds(),
		GiBPerSec:    gibPerSec,
		Env:          env,
	})
}

// calibrateRecordSize learns how many segment bytes a record of payload
// bytes takes, and the fixed bytes per segment, from what recovery reports
// scanning after two rounds of appends.
func calibrateRecordSize(ctx context.Context, dir string, payload int) (perRecord, fixed int64, err error) {
	opts := wal.Options{Preallocate: wal.PreallocOff, BackgroundSyncInterval: -1, SyncBytesThreshold: -1}
	var scanned [2]int64
	for i := range scanned {
		if _, err := fillLog(ctx, dir, opts, calibrationRecords, payload); err != nil {
			return 0, 0, err
		}
		l, err := wal.Open(dir, opts)
		if err != nil {
			return 0, 0, fmt.Errorf("reopen: %w", err)
		}
		scanned[i] = l.Recovery().ScannedBytes
		if err := l.Close(); err != nil {
			return 0, 0, fmt.Errorf("close: %w", err)
		}
	}
	perRecord = (scanned[1] - scanned[0]) / calibrationRecords
	if perRecord < int64(payload) {
		return 0, 0, fmt.Errorf("recovery scanned %d then %d bytes; cannot size a record", scanned[0], scanned[1])
	}
	return perRecord, scanned[0] - calibrationRecords*perRecord, nil
}

// fillLog opens the log in dir, appends records records of payload bytes in
// batches of recoveryBatch with AfterFlush, syncs, closes, and returns the
// log's WrittenNext.
func fillLog(ctx context.Context, dir string, opts wal.Options, records int64, payload int) (_ uint64, err error) {
	l, err := wal.Open(dir, opts)
	if err != nil {
		return 0, fmt.Errorf("open log: %w", err)
	}
	defer func() {
		if cerr := l.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close log: %w", cerr)
		}
	}()
	entries := makeEntries(recoveryBatch, payload)
	for left := records; left > 0; {
		n := min(left, recoveryBatch)
		if _, err := l.Append(ctx, entries[:n], wal.AfterFlush); err != nil {
			return 0, fmt.Errorf("append: %w", err)
		}
		left -= n
	}
	if err := l.Sync(ctx); err != nil {
		return 0, fmt.Errorf("sync: %w", err)
	}
	return l.WrittenNext(), nil
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

func roundUp(n, to int64) int64 { return ceilDiv(n, to) * to }
