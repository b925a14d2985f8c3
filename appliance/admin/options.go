package admin

import (
	"github.com/prometheus/client_golang/prometheus"

	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// DefaultMaxConnections is Options.MaxConnections' default.
const DefaultMaxConnections = 64

// Options configure a Server. Zero fields take the documented defaults.
type Options struct {
	// Tokens are the accepted bearer tokens, the same as the wire
	// protocol's. Empty (the default): no authentication.
	Tokens []string
	// Hosts are the names, besides localhost and IP addresses, that a
	// request's Host header may carry (any port): the host of the listen
	// address, the machine's name, the names operators reach it by. A
	// request for any other name is refused with 421 (see guard.go).
	// Default: none, so only localhost and IP addresses are served.
	Hosts []string
	// Logger receives request failures. Default slog.Default().
	Logger *slog.Logger
	// ReadHeaderTimeout bounds the reading of a request's headers, and
	// how long a new connection may stay silent. Default 10s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the reading of a whole request, body included
	// (a publish may carry 16 MiB). Default 1m.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the
	// end of its answer. It must exceed the longest wait a fetch may ask
	// for (POST /api/queues/{name}/get, wait_ms up to 30 s), with room for
	// the body and the answer. Default 2m.
	WriteTimeout time.Duration
	// IdleTimeout is how long a kept-alive connection may wait for its
	// next request. Default 1m.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's header block. Default 128 KiB,
	// room for the longest token (64 KiB).
	MaxHeaderBytes int
	// MaxConnections bounds the connections served at once. One more
	// waits in the kernel's accept queue until one of them ends (it
	// finishes, idles out, or times out), so a burst is delayed, not
	// refused. Default 64.
	MaxConnections int
	// PublishBytesInFlight bounds the publish bodies (POST
	// /api/queues/{name}/messages, up to 16 MiB each) held at once over
	// every connection; a publish that does not fit waits up to 10 s for
	// room, then is refused with 503 busy. Default 64 MiB
	// (DefaultPublishBytesInFlight).
	PublishBytesInFlight int64
	// UI, if set, is mounted at "/" (the dashboard). Default: none.
	UI http.Handler
	// ServerConnections reports the wire server's open connections for the
	// fibril_connections gauge. Default nil: the gauge is not exported.
	ServerConnections func() int
	// ServerRefused reports the connections the wire server turned away
	// at its connection limit, for fibril_connections_refused_total.
	// Default nil: not exported.
	ServerRefused func() uint64
	// ServerStats reports the wire server's unauthenticated connections
	// and queued deliveries, for the fibril_connections_pre_hello*,
	// fibril_connections_hello_timeouts_total, fibril_delivery_queued_bytes
	// and fibril_slow_consumer* metrics. Default nil: not exported.
	ServerStats func() ServerStats
	// Metrics counts the broker's events; pass the same value as the
	// broker's appliance.Options.Observer. Default nil: a fresh Metrics
	// that nothing feeds, so event counters and histograms stay at zero.
	Metrics *Metrics
	// Version is the broker's version as GET /api/node reports it.
	// Default: the main module's version from the build information
	// ("(devel)" for a build from a checkout without VCS stamping).
	Version string
	// Bridges reports the state and counters of the NATS bridges running
	// beside the broker, for GET /api/bridges and the fibril_bridge_
	// metrics. Default nil: the endpoint answers an empty list and no
	// bridge metrics are exported.
	Bridges func() []BridgeStats
	// Uplinks reports the uplinks running beside the broker, for GET
	// /api/uplinks (rendered as JSON as they are). Default nil: none.
	Uplinks func() any
	// Sessions reports the client connections and their subscriptions,
	// for GET /api/connections (rendered as JSON as they are) and the
	// dashboard's Connections and Consumers pages. Default nil: none.
	Sessions func() any
	// Collectors are exported at /metrics beside the broker's own (the
	// uplinks' fibril_uplink_ metrics). Default none.
	Collectors []prometheus.Collector
	// Cluster reports the cluster as this node sees it (members, leader,
	// assignments, followers' progress), for GET /api/cluster, the
	// fibril_cluster_ and fibril_replica_ metrics and the dashboard's
	// Cluster page. Default nil, or a false second result: a solo node,
	// where GET /api/cluster answers 404 not_clustered and no cluster
	// metrics are exported.
	Cluster func() (ClusterView, bool)
	// ClusterOps, set on a cluster node, routes POST /api/queues (the body
	// may name a "policy") and DELETE /api/queues/{name} through the
	// control plane, and serves POST /api/cluster/join. Default nil:
	// declarations and deletes go to the local broker and the join
	// endpoint answers 404 not_clustered.
	ClusterOps ClusterOps
	// HistoryInterval is how often the server's owner calls Sample, as
	// the history endpoints report it. Default DefaultHistoryInterval.
	HistoryInterval time.Duration
	// HistorySamples is how many samples each queue's ring keeps. Default
	// DefaultHistorySamples (an hour at 5 s).
	HistorySamples int
}

// Validate reports options that cannot work.
func (o Options) Validate() error {
	for _, t := range o.Tokens {
		if t == "" {
			return errEmptyToken
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ReadHeaderTimeout", o.ReadHeaderTimeout}, {"ReadTimeout", o.ReadTimeout}, {"WriteTimeout", o.WriteTimeout}, {"IdleTimeout", o.IdleTimeout}} {
		if d.v < 0 {
			return fmt.Errorf("admin: %s %v is negative", d.name, d.v)
		}
	}
	if o.WriteTimeout != 0 && o.WriteTimeout <= maxGetWait {
		return fmt.Errorf("admin: WriteTimeout %v does not exceed the longest fetch wait (%v)", o.WriteTimeout, maxGetWait)
	}
	if o.PublishBytesInFlight < 0 {
		return fmt.Errorf("admin: PublishBytesInFlight %d is negative", o.PublishBytesInFlight)
	}
	if o.MaxHeaderBytes < 0 || o.MaxConnections < 0 {
		return fmt.Errorf("admin: MaxHeaderBytes %d or MaxConnections %d is negative", o.MaxHeaderBytes, o.MaxConnections)
	}
	for _, h := range o.Hosts {
		if _, err := netip.ParseAddr(h); err == nil {
			continue
		}
		if normalHost(h) == "" || strings.ContainsAny(h, ":/[]@ \t\r\n") {
			return fmt.Errorf("admin: host %q is not a host name (give names without a port or scheme)", h)
		}
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	if o.Version == "" {
		o.Version = buildVersion()
	}
	if o.HistoryInterval <= 0 {
		o.HistoryInterval = DefaultHistoryInterval
	}
	if o.HistorySamples <= 0 {
		o.HistorySamples = DefaultHistorySamples
	}
	if o.ReadHeaderTimeout == 0 {
		o.ReadHeaderTimeout = 10 * time.Second
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = time.Minute
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = 2 * time.Minute
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = time.Minute
	}
	if o.MaxHeaderBytes == 0 {
		o.MaxHeaderBytes = 128 << 10
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if o.PublishBytesInFlight == 0 {
		o.PublishBytesInFlight = DefaultPublishBytesInFlight
	}
	return o
}
