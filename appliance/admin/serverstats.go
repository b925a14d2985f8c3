package admin

import (
	"github.com/prometheus/client_golang/prometheus"
)

// ServerStats is what the wire server reports about the connections that
// have not authenticated and the deliveries queued to consumers.
type ServerStats struct {
	PreHello            int    // connections waiting for their Hello
	PreHelloEvicted     uint64 // closed to make room under [server] max_pre_hello / max_pre_hello_per_source
	HelloTimeouts       uint64 // closed for sending no Hello in time
	QueuedDeliveryBytes int64  // Deliver frames queued and not yet written, on every connection
	SlowConsumerPauses  uint64 // connections paused by [server] delivery_budget
	SlowConsumersClosed uint64 // of which closed after the grace period
	SlowConsumersPaused int    // paused now
}

// serverCollector exports ServerStats, read from Options.ServerStats at
// each scrape. Without it it exports nothing.
type serverCollector struct {
	stats func() ServerStats // nil: not exported
}

type serverMetric struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(ServerStats) float64
}

var serverMetrics = []serverMetric{
	{desc("fibril_connections_pre_hello", "Client connections that have not authenticated yet (waiting for their Hello, or refused)."), prometheus.GaugeValue,
		func(s ServerStats) float64 { return float64(s.PreHello) }},
	{desc("fibril_connections_pre_hello_evicted_total", "Unauthenticated client connections closed to make room for a newer one at server.max_pre_hello or server.max_pre_hello_per_source."), prometheus.CounterValue,
		func(s ServerStats) float64 { return float64(s.PreHelloEvicted) }},
	{desc("fibril_connections_hello_timeouts_total", "Client connections closed for sending no Hello within the (possibly shortened) Hello timeout."), prometheus.CounterValue,
		func(s ServerStats) float64 { return float64(s.HelloTimeouts) }},
	{desc("fibril_delivery_queued_bytes", "Bytes of deliveries queued to consumers and not yet written, on every connection (bounded by server.delivery_budget)."), prometheus.GaugeValue,
		func(s ServerStats) float64 { return float64(s.QueuedDeliveryBytes) }},
	{desc("fibril_slow_consumers_paused", "Connections paused now because the deliveries queued to them passed server.delivery_budget."), prometheus.GaugeValue,
		func(s ServerStats) float64 { return float64(s.SlowConsumersPaused) }},
	{desc("fibril_slow_consumer_pauses_total", "Times a slow consumer's connection was paused at server.delivery_budget."), prometheus.CounterValue,
		func(s ServerStats) float64 { return float64(s.SlowConsumerPauses) }},
	{desc("fibril_slow_consumers_closed_total", "Paused connections closed with a Goodbye for not catching up within server.slow_consumer_grace."), prometheus.CounterValue,
		func(s ServerStats) float64 { return float64(s.SlowConsumersClosed) }},
}

// Describe implements prometheus.Collector.
func (c serverCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range serverMetrics {
		ch <- m.desc
	}
}

// Collect implements prometheus.Collector.
func (c serverCollector) Collect(ch chan<- prometheus.Metric) {
	if c.stats == nil {
		return
	}
	s := c.stats()
	for _, m := range serverMetrics {
		ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.value(s))
	}
}
