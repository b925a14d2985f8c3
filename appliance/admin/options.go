package admin

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
)

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
	// UI, if set, is mounted at "/" (the dashboard). Default: none.
	UI http.Handler
	// ServerConnections reports the wire server's open connections for the
	// fibril_connections gauge. Default nil: the gauge is not exported.
	ServerConnections func() int
	// ServerRefused reports the connections the wire server turned away
	// at its connection limit, for fibril_connections_refused_total.
	// Default nil: not exported.
	ServerRefused func() uint64
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
}

// Validate reports options that cannot work.
func (o Options) Validate() error {
	for _, t := range o.Tokens {
		if t == "" {
			return errEmptyToken
		}
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
	return o
}
