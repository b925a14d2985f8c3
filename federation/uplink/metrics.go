package uplink

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports the uplinks' state and counters as fibril_uplink_*
// metrics, read from stats at each scrape, labelled by uplink name and,
// per forwarded queue, by the local queue's name. Register it with the
// admin API's Options.Collectors.
func Collector(stats func() []Stats) prometheus.Collector { return collector{stats: stats} }

type collector struct {
	stats func() []Stats
}

var states = []State{StateConnecting, StateConnected, StateBackingOff, StateRefused, StateWaiting}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descState = desc("fibril_uplink_state",
		"1 for the uplink's link state (connecting, connected, backing off, refused), 0 for the others.", "uplink", "state")
	descQueueState = desc("fibril_uplink_queue_state",
		"1 for a forwarded queue's state (connecting, connected, backing off, refused, waiting), 0 for the others.", "uplink", "queue", "state")
	descWeakened = desc("fibril_uplink_weakened",
		"1 while a durable local queue is forwarded into a buffered remote queue (a weaker promise).", "uplink", "queue")
	descBacklogMessages = desc("fibril_uplink_backlog_messages",
		"Messages of the local queue not yet confirmed by the remote queue, in flight included.", "uplink", "queue")
	descBacklogBytes = desc("fibril_uplink_backlog_bytes",
		"Bytes of the local queue not yet confirmed by the remote queue, in flight included.", "uplink", "queue")
	descOldest = desc("fibril_uplink_oldest_waiting_seconds",
		"How long the oldest message the uplink holds has waited for its remote confirm.", "uplink", "queue")
	descInFlight = desc("fibril_uplink_in_flight",
		"Publishes sent to the remote queue and not confirmed yet.", "uplink", "queue")
	descLastConfirm = desc("fibril_uplink_last_confirm_timestamp_seconds",
		"Unix time of the last remote confirm; absent before the first.", "uplink", "queue")
)

// counter is a counter read from QueueStats.
type counter struct {
	desc  *prometheus.Desc
	value func(QueueStats) uint64
}

var counters = []counter{
	{desc("fibril_uplink_forwarded_total", "Messages the remote queue confirmed and the uplink then acked locally (duplicates included).", "uplink", "queue"),
		func(q QueueStats) uint64 { return q.Forwarded }},
	{desc("fibril_uplink_duplicates_total", "Forwarded messages the remote queue confirmed as repeats it already held (dedupe window).", "uplink", "queue"),
		func(q QueueStats) uint64 { return q.Duplicates }},
	{desc("fibril_uplink_resent_total", "Publishes sent again after a failure or a reconnect.", "uplink", "queue"),
		func(q QueueStats) uint64 { return q.Resent }},
	{desc("fibril_uplink_refused_total", "Messages the remote queue can never take, settled locally as discarded or dead-lettered.", "uplink", "queue"),
		func(q QueueStats) uint64 { return q.Refused }},
}

// Describe implements prometheus.Collector.
func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descState, descQueueState, descWeakened, descBacklogMessages, descBacklogBytes,
		descOldest, descInFlight, descLastConfirm} {
		ch <- d
	}
	for _, k := range counters {
		ch <- k.desc
	}
}

// Collect implements prometheus.Collector.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	if c.stats == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, s := range c.stats() {
		for _, st := range states[:4] { // a link is never waiting; its queues may be
			gauge(descState, one(s.State == st), s.Name, string(st))
		}
		for _, q := range s.Queues {
			for _, st := range states {
				gauge(descQueueState, one(q.State == st), s.Name, q.Local, string(st))
			}
			gauge(descWeakened, one(q.Weakened), s.Name, q.Local)
			if q.BacklogMessages >= 0 { // -1: not known
				gauge(descBacklogMessages, float64(q.BacklogMessages), s.Name, q.Local)
				gauge(descBacklogBytes, float64(q.BacklogBytes), s.Name, q.Local)
			}
			gauge(descOldest, q.OldestWaiting.Seconds(), s.Name, q.Local)
			gauge(descInFlight, float64(q.InFlight), s.Name, q.Local)
			if !q.LastConfirm.IsZero() {
				gauge(descLastConfirm, float64(q.LastConfirm.UnixNano())/1e9, s.Name, q.Local)
			}
			for _, k := range counters {
				ch <- prometheus.MustNewConstMetric(k.desc, prometheus.CounterValue, float64(k.value(q)), s.Name, q.Local)
			}
		}
	}
}

func one(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
