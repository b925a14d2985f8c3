// Package admin is the broker's admin HTTP API and its Prometheus metrics,
// served by fibrild on the [admin] listen address (127.0.0.1:7421 by
// default) next to the dashboard.
//
// Routes (Go 1.22 ServeMux patterns; docs/admin-api.md has examples):
//
//	GET    /api/queues                  list, with failed queues
//	POST   /api/queues                  declare (create or confirm)
//	GET    /api/queues/{name}           inspect
//	DELETE /api/queues/{name}           delete
//	POST   /api/queues/{name}/messages  publish one message
//	POST   /api/queues/{name}/get       fetch and settle a few messages
//	GET    /api/settings                runtime settings
//	PUT    /api/settings                change them (validated, persisted)
//	GET    /api/node                    version, disk, process figures
//	GET    /api/bridges                 the NATS bridges' state and counters
//	GET    /api/cluster                 members, leader, assignments (404 solo)
//	GET    /api/cluster/settings        cluster-wide settings (404 solo)
//	PUT    /api/cluster/settings        change them through the control plane
//	GET    /healthz                     the process answers
//	GET    /readyz                      broker open, no queue failed or latched (names them only with a token, when tokens are set)
//	GET    /metrics                     Prometheus exposition
//	/                                   the dashboard, if Options.UI is set
//
// Every API handler returns (value, error) through one decorator (jsonAPI)
// that writes the value as JSON, or maps the error to a status and a body
// {"error": "...", "code": "..."}; see errors.go for the table.
//
// Before any route, every request passes guard.go's checks: its Host must
// be one of the listener's own names (localhost, an IP address,
// Options.Hosts), else 421, which defeats DNS rebinding; and a request that
// changes state (not GET, HEAD or OPTIONS) that a browser sent from a page
// of another origin (Sec-Fetch-Site cross-site or same-site, or an Origin
// that is not the Host) is refused with 403, tokens or not. No CORS header
// is sent.
//
// Authentication: when Options.Tokens is not empty, /api/ and /metrics
// require "Authorization: Bearer <token>" with one of them (the wire
// protocol's tokens). /healthz and /readyz answer without a token so that
// probes need none; the UI's static files are served without one, and the
// dashboard sends the token on its API calls. Tokens are compared as
// SHA-256 digests, all of them every time.
//
// Serving: HTTPServer returns the http.Server with the Options' timeouts
// and header limit (HTTP/1.1 only), and Listener caps the connections at
// Options.MaxConnections; fibrild serves the one on the other.
//
// Metrics come from two places. State the broker already keeps (queue
// backlog and counters, partition frontiers, the logs' sync and cache
// counters) is read when /metrics is scraped, by a custom collector, so an
// idle broker does no metrics work. Events (publishes, confirms,
// deliveries, their latencies, fsync latency) are counted by Metrics, an
// appliance.Observer given to the broker when it opens.
package admin
