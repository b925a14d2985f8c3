package admin

import (
	"github.com/prometheus/client_golang/prometheus"
)

// bridgeCollector exports the NATS bridges' state and counters, read from
// Options.Bridges at each scrape, labelled by bridge name. Without bridges
// it exports nothing.
type bridgeCollector struct {
	stats func() []BridgeStats // nil: no bridges
}

var bridgeStates = []string{BridgeStarting, BridgeConnected, BridgeReconnecting, BridgeStopped}

var (
	descBridgeState = desc("fibril_bridge_state",
		"1 for the bridge's NATS connection state (starting, connected, reconnecting, stopped), 0 for the others.", "bridge", "state")
	descBridgeBlocked = desc("fibril_bridge_blocked",
		"1 while a JetStream ingest of the bridge waits for its queue to take a message (pulling paused).", "bridge")
	descBridgeMissing = desc("fibril_bridge_missing_queues",
		"Queues the bridge needs that do not exist (see GET /api/bridges for their names).", "bridge")
	descBridgeDropped = desc("fibril_bridge_dropped_total",
		"Core NATS messages the bridge gave up, by reason (the broker's error code, no_queue, shutdown).", "bridge", "reason")
)

// bridgeCounter is a counter read from BridgeStats.
type bridgeCounter struct {
	desc  *prometheus.Desc
	value func(BridgeStats) uint64
}

var bridgeCounters = []bridgeCounter{
	{desc("fibril_bridge_reconnects_total", "NATS reconnects of the bridge.", "bridge"),
		func(s BridgeStats) uint64 { return s.Reconnects }},
	{desc("fibril_bridge_received_total", "Messages the bridge's ingests took from NATS, JetStream redeliveries included.", "bridge"),
		func(s BridgeStats) uint64 { return s.Received }},
	{desc("fibril_bridge_published_total", "Ingested messages the broker confirmed, duplicates included.", "bridge"),
		func(s BridgeStats) uint64 { return s.Published }},
	{desc("fibril_bridge_duplicates_total", "Ingested messages the broker confirmed as repeats inside the queue's dedupe window.", "bridge"),
		func(s BridgeStats) uint64 { return s.Duplicates }},
	{desc("fibril_bridge_retries_total", "Ingest publishes retried: the queue refused them or the broker connection was lost.", "bridge"),
		func(s BridgeStats) uint64 { return s.Retries }},
	{desc("fibril_bridge_jetstream_acked_total", "JetStream messages acked after the broker confirmed them.", "bridge"),
		func(s BridgeStats) uint64 { return s.JetStreamAcked }},
	{desc("fibril_bridge_egressed_total", "Queue messages NATS accepted and the bridge then acked.", "bridge"),
		func(s BridgeStats) uint64 { return s.Egressed }},
	{desc("fibril_bridge_egress_failed_total", "Queue messages released for redelivery because NATS did not accept them.", "bridge"),
		func(s BridgeStats) uint64 { return s.EgressFailed }},
}

// Describe implements prometheus.Collector.
func (c bridgeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBridgeState, descBridgeBlocked, descBridgeMissing, descBridgeDropped} {
		ch <- d
	}
	for _, bc := range bridgeCounters {
		ch <- bc.desc
	}
}

// Collect implements prometheus.Collector.
func (c bridgeCollector) Collect(ch chan<- prometheus.Metric) {
	if c.stats == nil {
		return
	}
	for _, s := range c.stats() {
		for _, state := range bridgeStates {
			v := 0.0
			if s.State == state {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descBridgeState, prometheus.GaugeValue, v, s.Name, state)
		}
		blocked := 0.0
		if s.Blocked {
			blocked = 1
		}
		ch <- prometheus.MustNewConstMetric(descBridgeBlocked, prometheus.GaugeValue, blocked, s.Name)
		ch <- prometheus.MustNewConstMetric(descBridgeMissing, prometheus.GaugeValue, float64(len(s.MissingQueues)), s.Name)
		for reason, n := range s.Dropped {
			ch <- prometheus.MustNewConstMetric(descBridgeDropped, prometheus.CounterValue, float64(n), s.Name, reason)
		}
		for _, bc := range bridgeCounters {
			ch <- prometheus.MustNewConstMetric(bc.desc, prometheus.CounterValue, float64(bc.value(s)), s.Name)
		}
	}
}
