package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibril-edge/fibril/wal"
)

// syncGroupMetrics exports the counters of the node's sync group (the
// syncs its logs share, wal.SyncGroup), by lane: background (the logs'
// background syncs) and waited (the syncs appends wait for, a durable
// queue's); none without a group.
func syncGroupMetrics(g *wal.SyncGroup) []prometheus.Collector {
	if g == nil {
		return nil
	}
	var out []prometheus.Collector
	for _, lane := range []struct {
		name  string
		stats func() wal.SyncGroupStats
	}{{"background", g.Stats}, {"waited", g.WaitedStats}} {
		counter := func(name, help string, value func(wal.SyncGroupStats) uint64) prometheus.Collector {
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: prometheus.Labels{"lane": lane.name}},
				func() float64 { return float64(value(lane.stats())) })
		}
		out = append(out,
			counter("fibril_sync_group_syncs_total", "Syncs of the data directory's file system (syncfs) that logs' syncs shared.",
				func(s wal.SyncGroupStats) uint64 { return s.FSSyncs }),
			counter("fibril_sync_group_failures_total", "Of those, syncs that reported a writeback error (every log then checks its own file).",
				func(s wal.SyncGroupStats) uint64 { return s.Failures }),
			counter("fibril_sync_group_covered_total", "Log syncs completed by a shared sync.",
				func(s wal.SyncGroupStats) uint64 { return s.Covered }),
			counter("fibril_sync_group_alone_total", "Log syncs that found no other log asking and synced their own file.",
				func(s wal.SyncGroupStats) uint64 { return s.Alone }),
			counter("fibril_sync_group_checked_total", "Log syncs that also synced their own file: at each log's first shared sync, and after a shared sync reported an error.",
				func(s wal.SyncGroupStats) uint64 { return s.Verified }))
	}
	return out
}
