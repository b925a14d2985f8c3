// Package e2ebench measures brokers end to end, the way a user sees them:
// publishers on their own connections send on an open-loop schedule, one
// consumer receives, and every message carries the time it was meant to
// be sent. Latency is taken from that intended time to the publish's
// confirm and to the delivery at the consumer, so a broker (or a
// publisher) that falls behind shows it in the latency instead of hiding
// it by sending later (no coordinated omission).
//
// A Target is one broker in one mode (Fibril durable or buffered, NATS
// JetStream with always-sync or default sync). RunOpenLoop plays a
// Schedule against a fresh Stream of a Target; RunSaturation keeps a
// bounded window of publishes in flight per publisher and counts what is
// confirmed and delivered. A run that does not keep up with its schedule
// is reported as not sustained with the rate it reached, never with
// latencies. Broker processes are measured from their own accounting in
// /proc (ProcSample): CPU time, peak RSS, context switches of every
// thread, and bytes written to storage.
//
// Summarize, Markdown and LatencySVG turn result lines (Result, one per
// run) into the report's tables and plot.
package e2ebench
