package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibril-edge/fibril/wal"
)

// syncGroupMetrics exports the counters of the node's sync group (the
// background syncs its logs share, wal.SyncGroup); none without one.
func syncGroupMetrics(g *wal.SyncGroup) []prometheus.Collector {
	if g == nil {
		return nil
	}
	counter := func(name, help string, value func(wal.SyncGroupStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(value(g.Stats())) })
	}
	return []prometheus.Collector{
		counter("fibril_sync_group_syncs_total", "Syncs of the data directory's file system (syncfs) run for the logs' background syncs.",
			func(s wal.SyncGroupStats) uint64 { return s.FSSyncs }),
		counter("fibril_sync_group_failures_total", "Of those, syncs that reported a writeback error (every log then checks its own file).",
			func(s wal.SyncGroupStats) uint64 { return s.Failures }),
		counter("fibril_sync_group_covered_total", "Background syncs of queue logs and copies completed by a shared sync.",
			func(s wal.SyncGroupStats) uint64 { return s.Covered }),
		counter("fibril_sync_group_checked_total", "Background syncs that also synced their own file after a shared sync reported an error.",
			func(s wal.SyncGroupStats) uint64 { return s.Verified }),
	}
}
