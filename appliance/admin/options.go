package admin

import (
	"log/slog"
	"net/http"
)

// Options configure a Server. Zero fields take the documented defaults.
type Options struct {
	// Tokens are the accepted bearer tokens, the same as the wire
	// protocol's. Empty (the default): no authentication.
	Tokens []string
	// Logger receives request failures. Default slog.Default().
	Logger *slog.Logger
	// UI, if set, is mounted at "/" (the dashboard). Default: none.
	UI http.Handler
	// ServerConnections reports the wire server's open connections for the
	// fibril_connections gauge. Default nil: the gauge is not exported.
	ServerConnections func() int
	// Metrics counts the broker's events; pass the same value as the
	// broker's appliance.Options.Observer. Default nil: a fresh Metrics
	// that nothing feeds, so event counters and histograms stay at zero.
	Metrics *Metrics
	// Version is the broker's version as GET /api/node reports it.
	// Default: the main module's version from the build information
	// ("(devel)" for a build from a checkout without VCS stamping).
	Version string
	// Bridges reports the state and counters of the NATS bridges running
	// beside the broker, as GET /api/bridges returns them (any value that
	// encodes as JSON). Default nil: the endpoint answers an empty list.
	Bridges func() any
}

// Validate reports options that cannot work.
func (o Options) Validate() error {
	for _, t := range o.Tokens {
		if t == "" {
			return errEmptyToken
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
