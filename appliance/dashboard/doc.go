// Package dashboard is the operator's web page for a Fibril node: a small
// single-page app, written by hand in plain HTML, CSS and JavaScript modules
// and embedded in the binary with go:embed, so it needs no CDN and no build
// step. The admin HTTP API (package appliance/admin) mounts Handler at "/";
// the page reads everything it shows from that API (/api/queues,
// /api/settings, /metrics) with relative URLs, refreshing live.
//
// Pages, chosen by the URL fragment:
//
//	#/queues        every queue: buffered ones marked, per partition the
//	                records and bytes written but not synced and the age of
//	                the oldest, backlog, publish, deliver and leave rates
//	#/queues/NAME   one queue: configuration, counters, partitions in full
//	#/settings      the runtime settings, changed with PUT /api/settings
//	#/node          node figures: disk, sync latency and process figures
//	                from /metrics when it serves them, totals of /api/queues
//	#/bridges       the NATS bridges: state, missing queues, counters
//	#/cluster       a cluster member's /api/cluster: members, leader, per
//	                queue the policy, per partition owner, followers,
//	                epoch, how the policy reads ("written on 2 of 3") and
//	                the followers' written and durable progress; its link
//	                shows only while /api/cluster answers 200
//
// Every figure that reports progress names its boundary: written (handed to
// the operating system) or durable (covered by a completed fdatasync). Rates
// are computed in the browser from counter deltas between two refreshes:
// publishes from the queue's "published" counter, messages leaving the
// queue from published minus backlog, deliveries from
// fibril_deliveries_total when /metrics is served. When the API answers
// 401 the page asks for a token, keeps it in localStorage and sends it as
// a bearer token.
package dashboard
