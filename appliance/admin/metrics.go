package admin

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts the broker's events for /metrics. It is the broker's
// appliance.Observer: create it before the broker opens, pass it as
// appliance.Options.Observer and as admin Options.Metrics. Each event costs
// a map read and an atomic add, or a histogram observation.
type Metrics struct {
	events sync.Map // eventKey -> *eventCounts

	confirmLatency   *prometheus.HistogramVec // {mode}
	publishToDeliver *prometheus.HistogramVec // {mode}
	fsyncDuration    prometheus.Histogram
	fsyncAppends     prometheus.Histogram
	confirmByMode    [3]prometheus.Observer // indexed by appliance.Durability
	deliverByMode    [3]prometheus.Observer
}

var (
	_ appliance.Observer      = (*Metrics)(nil)
	_ appliance.FanInObserver = (*Metrics)(nil)
)

type eventKey struct {
	queue string
	mode  appliance.Durability
}

// eventCounts are one queue's event counters since the process started.
type eventCounts struct {
	publishes  atomic.Uint64 // every publish to the queue that completed, refused ones included
	confirms   atomic.Uint64 // of which confirmed (duplicates included)
	deliveries atomic.Uint64 // every delivery, redeliveries included
}

// NewMetrics returns event metrics with nothing counted.
func NewMetrics() *Metrics {
	m := &Metrics{
		confirmLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fibril_confirm_latency_seconds",
			Help:    "Time from the broker accepting a publish to its confirm at the queue's durability (written for buffered, synced for durable).",
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 18), // 25 µs to 3.3 s
		}, []string{"mode"}),
		publishToDeliver: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fibril_publish_to_deliver_seconds",
			Help:    "Time from a publish to its first delivery to a consumer.",
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 22), // 25 µs to 52 s
		}, []string{"mode"}),
		fsyncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fibril_fsync_duration_seconds",
			Help:    "Duration of each fdatasync of a queue log segment, failed ones included.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16), // 50 µs to 1.6 s
		}),
		fsyncAppends: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fibril_fsync_appends",
			Help:    "Durable appends each fdatasync completed (the group commit's fan-in); syncs that completed none are not counted.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12), // 1 to 2048
		}),
	}
	for _, d := range []appliance.Durability{appliance.Durable, appliance.Buffered} {
		m.confirmByMode[d] = m.confirmLatency.WithLabelValues(d.String())
		m.deliverByMode[d] = m.publishToDeliver.WithLabelValues(d.String())
	}
	return m
}

func (m *Metrics) counts(queue string, mode appliance.Durability) *eventCounts {
	k := eventKey{queue, mode}
	if c, ok := m.events.Load(k); ok {
		return c.(*eventCounts)
	}
	c, _ := m.events.LoadOrStore(k, new(eventCounts))
	return c.(*eventCounts)
}

// Published counts a completed publish and, for a confirm, its latency.
func (m *Metrics) Published(queue string, mode appliance.Durability, took time.Duration, err error) {
	c := m.counts(queue, mode)
	c.publishes.Add(1)
	if err != nil {
		return
	}
	c.confirms.Add(1)
	if int(mode) < len(m.confirmByMode) && m.confirmByMode[mode] != nil {
		m.confirmByMode[mode].Observe(took.Seconds())
	}
}

// Delivered counts a delivery and, for a first delivery, the time since
// its publish.
func (m *Metrics) Delivered(queue string, mode appliance.Durability, deliveries uint32, sincePublish time.Duration) {
	if deliveries == 1 && int(mode) < len(m.deliverByMode) && m.deliverByMode[mode] != nil {
		m.deliverByMode[mode].Observe(max(sincePublish, 0).Seconds())
	}
	m.counts(queue, mode).deliveries.Add(1)
}

// Synced observes one fdatasync's duration.
func (m *Metrics) Synced(queue string, partition int, took time.Duration, err error) {
	m.fsyncDuration.Observe(took.Seconds())
}

// SyncCompleted observes how many durable appends one fdatasync completed.
func (m *Metrics) SyncCompleted(queue string, partition int, appends int) {
	m.fsyncAppends.Observe(float64(appends))
}

// Describe implements prometheus.Collector for the histograms; the event
// counters are exported by the state collector, which knows which queues
// still exist.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.confirmLatency.Describe(ch)
	m.publishToDeliver.Describe(ch)
	m.fsyncDuration.Describe(ch)
	m.fsyncAppends.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.confirmLatency.Collect(ch)
	m.publishToDeliver.Collect(ch)
	m.fsyncDuration.Collect(ch)
	m.fsyncAppends.Collect(ch)
}

// eachQueue visits the event counters; keep reports whether a queue still
// exists in that mode, and the counters of those that do not are dropped.
func (m *Metrics) eachQueue(keep func(queue string, mode appliance.Durability) bool, f func(queue string, mode appliance.Durability, c *eventCounts)) {
	m.events.Range(func(k, v any) bool {
		key := k.(eventKey)
		if !keep(key.queue, key.mode) {
			m.events.Delete(k)
			return true
		}
		f(key.queue, key.mode, v.(*eventCounts))
		return true
	})
}
