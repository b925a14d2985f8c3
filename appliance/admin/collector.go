package admin

import (
	"errors"
	"strconv"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/prometheus/client_golang/prometheus"
)

// stateCollector reads the broker's state when /metrics is scraped: queue
// backlog and counters, partition frontiers and log counters. Nothing runs
// between scrapes.
type stateCollector struct {
	b *appliance.Broker
	m *Metrics
}

func newStateCollector(b *appliance.Broker, m *Metrics) *stateCollector {
	return &stateCollector{b: b, m: m}
}

var (
	queueLabels     = []string{"queue", "mode"}
	partitionLabels = []string{"queue", "mode", "partition"}
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// Event counters (fed by Metrics, exported here).
var (
	descPublishes  = desc("fibril_publishes_total", "Publishes to the queue that completed, confirmed or refused.", queueLabels...)
	descConfirms   = desc("fibril_confirms_total", "Publishes confirmed at the queue's durability, duplicates included.", queueLabels...)
	descDeliveries = desc("fibril_deliveries_total", "Deliveries to consumers, redeliveries included.", queueLabels...)
	descNacked     = desc("fibril_queue_nacked_total", "Deliveries the queue's consumers nacked since start, by what became of them: requeue (ready again) or reject (discarded or dead-lettered).", "queue", "mode", "action")
)

// queueMetric is a per-queue figure read from QueueInfo.
type queueMetric struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(appliance.QueueInfo) float64
}

var queueMetrics = []queueMetric{
	{desc("fibril_queue_messages", "Unsettled messages: ready plus in flight.", queueLabels...), prometheus.GaugeValue,
		func(q appliance.QueueInfo) float64 { return float64(q.Messages) }},
	{desc("fibril_queue_ready_messages", "Messages ready for delivery.", queueLabels...), prometheus.GaugeValue,
		func(q appliance.QueueInfo) float64 { return float64(q.Ready) }},
	{desc("fibril_queue_in_flight_messages", "Messages leased to consumers or being settled.", queueLabels...), prometheus.GaugeValue,
		func(q appliance.QueueInfo) float64 { return float64(q.InFlight) }},
	{desc("fibril_queue_bytes", "Bytes the unsettled messages store: bodies, headers and ids (what max_bytes counts).", queueLabels...), prometheus.GaugeValue,
		func(q appliance.QueueInfo) float64 { return float64(q.Bytes) }},
	{desc("fibril_queue_dedupe_entries", "Message ids the queue's dedupe table remembers, all partitions.", queueLabels...), prometheus.GaugeValue,
		func(q appliance.QueueInfo) float64 { return float64(q.Dedupe.Entries) }},
	{desc("fibril_queue_dedupe_bytes", "Memory the dedupe table's ids take, as its byte bound counts it (id plus a fixed cost each).", queueLabels...), prometheus.GaugeValue,
		func(q appliance.QueueInfo) float64 { return float64(q.Dedupe.Bytes) }},
	{desc("fibril_queue_dedupe_evicted_total", "Message ids the dedupe table forgot before their window ended, to stay within its bounds.", queueLabels...), prometheus.CounterValue,
		func(q appliance.QueueInfo) float64 { return float64(q.Dedupe.Evicted) }},
	{desc("fibril_queue_consumers", "Subscriptions on the queue.", queueLabels...), prometheus.GaugeValue,
		func(q appliance.QueueInfo) float64 { return float64(q.Consumers) }},
	{desc("fibril_queue_stored_total", "Publishes stored in the queue's log since start (not duplicates).", queueLabels...), prometheus.CounterValue,
		func(q appliance.QueueInfo) float64 { return float64(q.Counters.Published) }},
	{desc("fibril_queue_duplicates_total", "Publishes recognised as duplicates inside the dedupe window.", queueLabels...), prometheus.CounterValue,
		func(q appliance.QueueInfo) float64 { return float64(q.Counters.Duplicates) }},
	{desc("fibril_queue_expired_total", "Leases that expired past their ack deadline.", queueLabels...), prometheus.CounterValue,
		func(q appliance.QueueInfo) float64 { return float64(q.Counters.Expired) }},
	{desc("fibril_queue_redelivered_total", "Deliveries of a message delivered before (after a nack, an expired lease or a consumer that left).", queueLabels...), prometheus.CounterValue,
		func(q appliance.QueueInfo) float64 { return float64(q.Counters.Redelivered) }},
	{desc("fibril_queue_acked_total", "Deliveries the queue's consumers acknowledged since start.", queueLabels...), prometheus.CounterValue,
		func(q appliance.QueueInfo) float64 { return float64(q.Counters.Acked) }},
	{desc("fibril_queue_mode_change_pending", "1 while a change of the queue's mode waits at its fence (syncs before a change to durable), else 0; mode is the mode in effect.", queueLabels...), prometheus.GaugeValue,
		func(q appliance.QueueInfo) float64 { return bool01(q.ModeChange.Pending) }},
	{desc("fibril_queue_mode_change_failed", "1 when the queue's last mode change failed (it kept its mode; GET /api/queues/{name} says why), else 0.", queueLabels...), prometheus.GaugeValue,
		func(q appliance.QueueInfo) float64 { return bool01(q.ModeChange.LastError != "") }},
	{desc("fibril_queue_purged_total", "Ready messages discarded by purges (POST /api/queues/{name}/purge).", queueLabels...), prometheus.CounterValue,
		func(q appliance.QueueInfo) float64 { return float64(q.Counters.Purged) }},
	{desc("fibril_queue_discarded_total", "Messages discarded (rejected without a dead-letter queue).", queueLabels...), prometheus.CounterValue,
		func(q appliance.QueueInfo) float64 { return float64(q.Counters.Discarded) }},
	{desc("fibril_queue_dead_lettered_total", "Messages moved to the dead-letter queue.", queueLabels...), prometheus.CounterValue,
		func(q appliance.QueueInfo) float64 { return float64(q.Counters.DeadLettered) }},
	{desc("fibril_queue_dropped_overflow_total", "Oldest messages dropped by the drop-oldest overflow policy.", queueLabels...), prometheus.CounterValue,
		func(q appliance.QueueInfo) float64 { return float64(q.Counters.DroppedOverflow) }},
	{desc("fibril_queue_lost_quarantined_total", "Messages lost with segments quarantined while serving.", queueLabels...), prometheus.CounterValue,
		func(q appliance.QueueInfo) float64 { return float64(q.Counters.LostQuarantined) }},
}

var descRefusals = desc("fibril_publish_refusals_total",
	"Publishes refused: reason queue_full (the queue's limits) or disk_full (storage full: disk budget, free-space watermark, or no space left).",
	"queue", "mode", "reason")

// partitionMetric is a per-partition figure read from PartitionInfo.
type partitionMetric struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(appliance.PartitionInfo) float64
}

var partitionMetrics = []partitionMetric{
	{desc("fibril_partition_written_next", "Offset after the last record handed to the operating system (written frontier).", partitionLabels...), prometheus.GaugeValue,
		func(p appliance.PartitionInfo) float64 { return float64(p.WrittenNext) }},
	{desc("fibril_partition_durable_next", "Offset after the last record covered by a completed fdatasync (durable frontier).", partitionLabels...), prometheus.GaugeValue,
		func(p appliance.PartitionInfo) float64 { return float64(p.DurableNext) }},
	{desc("fibril_partition_head", "Lowest offset retained in the partition's log.", partitionLabels...), prometheus.GaugeValue,
		func(p appliance.PartitionInfo) float64 { return float64(p.Head) }},
	{desc("fibril_partition_unsynced_records", "Records written but not yet synced.", partitionLabels...), prometheus.GaugeValue,
		func(p appliance.PartitionInfo) float64 { return float64(p.UnsyncedRecords) }},
	{desc("fibril_partition_unsynced_bytes", "Bytes written but not yet synced.", partitionLabels...), prometheus.GaugeValue,
		func(p appliance.PartitionInfo) float64 { return float64(p.UnsyncedBytes) }},
	{desc("fibril_partition_oldest_unsynced_seconds", "Age of the oldest written but unsynced record; 0 when none.", partitionLabels...), prometheus.GaugeValue,
		func(p appliance.PartitionInfo) float64 { return p.OldestUnsynced.Seconds() }},
	{desc("fibril_partition_last_sync_timestamp_seconds", "Unix time of the last successful sync; 0 before one.", partitionLabels...), prometheus.GaugeValue,
		func(p appliance.PartitionInfo) float64 {
			if p.LastSync.IsZero() {
				return 0
			}
			return float64(p.LastSync.UnixNano()) / 1e9
		}},
	{desc("fibril_partition_segments", "Segment files in the partition's log.", partitionLabels...), prometheus.GaugeValue,
		func(p appliance.PartitionInfo) float64 { return float64(p.Segments) }},
	{desc("fibril_partition_messages", "Unsettled messages in the partition.", partitionLabels...), prometheus.GaugeValue,
		func(p appliance.PartitionInfo) float64 { return float64(p.Messages) }},
	{desc("fibril_quarantined_segments", "Log ranges set aside as corrupt that the partition's log still retains (retention past a range drops it from here).", partitionLabels...), prometheus.GaugeValue,
		func(p appliance.PartitionInfo) float64 { return float64(retainedQuarantine(p)) }},
	{desc("fibril_quarantined_segments_total", "Log ranges set aside as corrupt since the partition opened.", partitionLabels...), prometheus.CounterValue,
		func(p appliance.PartitionInfo) float64 { return float64(len(p.Quarantined)) }},
	{desc("fibril_quarantined_lost_records", "Records of the partition's log lost to damage: the offsets of its quarantined ranges.", partitionLabels...), prometheus.GaugeValue,
		func(p appliance.PartitionInfo) float64 { return float64(p.LostRecords) }},
	{desc("fibril_fsyncs_total", "Completed syncs of the partition's log since it opened: its own fdatasyncs and its syncs shared through the node's sync group.", partitionLabels...), prometheus.CounterValue,
		func(p appliance.PartitionInfo) float64 { return float64(p.Log.Syncs) }},
	{desc("fibril_background_syncs_total", "Syncs started by the background sync interval.", partitionLabels...), prometheus.CounterValue,
		func(p appliance.PartitionInfo) float64 { return float64(p.Log.BackgroundSyncs) }},
	{desc("fibril_background_sync_failures_total", "Background syncs that failed (each latches the log).", partitionLabels...), prometheus.CounterValue,
		func(p appliance.PartitionInfo) float64 { return float64(p.Log.BackgroundSyncFailures) }},
	{desc("fibril_group_commit_appends_per_fsync", "Synced appends completed per fdatasync since the log opened (group commit fan-in); 0 before a sync.", partitionLabels...), prometheus.GaugeValue,
		func(p appliance.PartitionInfo) float64 {
			if p.Log.Syncs == 0 {
				return 0
			}
			return float64(p.Log.SyncedAppends) / float64(p.Log.Syncs)
		}},
	{desc("fibril_tail_cache_hits_total", "Records read from the tail cache.", partitionLabels...), prometheus.CounterValue,
		func(p appliance.PartitionInfo) float64 { return float64(p.Log.TailCacheHits) }},
	{desc("fibril_tail_cache_misses_total", "Records not in the tail cache: read from the node's read cache or from segment files.", partitionLabels...), prometheus.CounterValue,
		func(p appliance.PartitionInfo) float64 { return float64(p.Log.TailCacheMisses) }},
	{desc("fibril_read_cache_partition_hits_total", "Records read from the node's read cache, of the tail cache's misses.", partitionLabels...), prometheus.CounterValue,
		func(p appliance.PartitionInfo) float64 { return float64(p.Log.ReadCacheHits) }},
}

// Broker-wide figures.
var (
	descLatched = desc("fibril_latched_logs", "Partition logs latched after a storage failure; reopen the broker to cut them back.")
	descQueues  = desc("fibril_queues", "Queues open.")
	descFailed  = desc("fibril_queues_failed", "Declared queues that could not be opened.")

	descReadCacheHits   = desc("fibril_read_cache_hits_total", "Records the node's read cache served: reads that missed their partition's tail cache and found the block here.")
	descReadCacheMisses = desc("fibril_read_cache_misses_total", "Records read from segment files: reads that missed the tail cache and the node's read cache.")
	descReadCacheBytes  = desc("fibril_read_cache_bytes", "Bytes of blocks the node's read cache holds.")
	descReadCacheBudget = desc("fibril_read_cache_budget_bytes", "The node's read cache budget (storage.read_cache); 0 when it is off.")
	descReadCacheOffers = desc("fibril_read_cache_blocks_offered_total", "Blocks offered to the node's read cache: leaving a tail cache while a reader trails them.")
	descReadCacheRefuse = desc("fibril_read_cache_blocks_refused_total", "Blocks the node's read cache turned away: its admission policy found them colder than what it holds, or it was busy.")
)

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPublishes, descConfirms, descDeliveries, descNacked, descRefusals, descLatched, descQueues, descFailed,
		descReadCacheHits, descReadCacheMisses, descReadCacheBytes, descReadCacheBudget, descReadCacheOffers, descReadCacheRefuse} {
		ch <- d
	}
	for _, qm := range queueMetrics {
		ch <- qm.desc
	}
	for _, pm := range partitionMetrics {
		ch <- pm.desc
	}
}

// Collect implements prometheus.Collector.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	latched := 0
	open := make(map[string]appliance.Durability)
	for _, name := range c.b.QueueNames() {
		in, err := c.b.QueueInfo(name)
		if err != nil {
			continue
		}
		open[name] = in.Config.Durability
		mode := in.Config.Durability.String()
		for _, qm := range queueMetrics {
			ch <- prometheus.MustNewConstMetric(qm.desc, qm.typ, qm.value(in), name, mode)
		}
		ch <- prometheus.MustNewConstMetric(descNacked, prometheus.CounterValue, float64(in.Counters.Requeued), name, mode, "requeue")
		ch <- prometheus.MustNewConstMetric(descNacked, prometheus.CounterValue, float64(in.Counters.Rejected), name, mode, "reject")
		ch <- prometheus.MustNewConstMetric(descRefusals, prometheus.CounterValue, float64(in.Counters.RejectedFull), name, mode, "queue_full")
		ch <- prometheus.MustNewConstMetric(descRefusals, prometheus.CounterValue, float64(in.Counters.RejectedDisk), name, mode, "disk_full")
		for _, p := range in.Partitions {
			idx := strconv.Itoa(p.Index)
			for _, pm := range partitionMetrics {
				ch <- prometheus.MustNewConstMetric(pm.desc, pm.typ, pm.value(p), name, mode, idx)
			}
			if p.Latched {
				latched++
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(descLatched, prometheus.GaugeValue, float64(latched))
	ch <- prometheus.MustNewConstMetric(descQueues, prometheus.GaugeValue, float64(len(open)))
	ch <- prometheus.MustNewConstMetric(descFailed, prometheus.GaugeValue, float64(len(c.b.QueueErrors())))
	rc := c.b.ReadCache()
	ch <- prometheus.MustNewConstMetric(descReadCacheHits, prometheus.CounterValue, float64(rc.Hits))
	ch <- prometheus.MustNewConstMetric(descReadCacheMisses, prometheus.CounterValue, float64(rc.Misses))
	ch <- prometheus.MustNewConstMetric(descReadCacheBytes, prometheus.GaugeValue, float64(rc.Held))
	ch <- prometheus.MustNewConstMetric(descReadCacheBudget, prometheus.GaugeValue, float64(rc.Budget))
	ch <- prometheus.MustNewConstMetric(descReadCacheOffers, prometheus.CounterValue, float64(rc.Offered))
	ch <- prometheus.MustNewConstMetric(descReadCacheRefuse, prometheus.CounterValue, float64(rc.Refused))
	c.m.eachQueue(func(q string, mode appliance.Durability) bool {
		if m, ok := open[q]; ok {
			return m == mode
		}
		return c.exists(q)
	},
		func(q string, mode appliance.Durability, e *eventCounts) {
			m := mode.String()
			ch <- prometheus.MustNewConstMetric(descPublishes, prometheus.CounterValue, float64(e.publishes.Load()), q, m)
			ch <- prometheus.MustNewConstMetric(descConfirms, prometheus.CounterValue, float64(e.confirms.Load()), q, m)
			ch <- prometheus.MustNewConstMetric(descDeliveries, prometheus.CounterValue, float64(e.deliveries.Load()), q, m)
		})
}

// exists checks a queue missing from the scrape's listing again, so that
// one declared since keeps its counters.
func (c *stateCollector) exists(q string) bool {
	_, err := c.b.QueueInfo(q)
	return !errors.Is(err, appliance.ErrNotFound)
}

// retainedQuarantine counts p's quarantined ranges that reach past the
// log's head: those retention has not dropped yet.
func retainedQuarantine(p appliance.PartitionInfo) int {
	n := 0
	for _, q := range p.Quarantined {
		if q.ToOffset > p.Head {
			n++
		}
	}
	return n
}
