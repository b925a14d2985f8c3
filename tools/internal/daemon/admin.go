package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/admin"
	"github.com/fibril-edge/fibril/appliance/dashboard"
	"github.com/fibril-edge/fibril/appliance/server"
	"github.com/fibril-edge/fibril/federation"
	"github.com/fibril-edge/fibril/federation/uplink"
	"github.com/fibril-edge/fibril/wal"
	"github.com/prometheus/client_golang/prometheus"
)

// adminServer is the admin HTTP API as Run serves it; served is nil when
// [admin] listen is empty.
type adminServer struct {
	api    *admin.Server // nil when [admin] listen is empty
	http   *http.Server
	cancel context.CancelFunc // ends the requests' contexts at shutdown
	served chan error
}

// serverStats reads the wire server's figures for the admin API's metrics.
func serverStats(srv *server.Server) func() admin.ServerStats {
	return func() admin.ServerStats {
		pauses, closed, paused := srv.SlowConsumers()
		return admin.ServerStats{
			PreHello: srv.PreHello(), PreHelloEvicted: srv.PreHelloEvicted(), HelloTimeouts: srv.HelloTimeouts(),
			QueuedDeliveryBytes: srv.QueuedDeliveryBytes(),
			SlowConsumerPauses:  pauses, SlowConsumersClosed: closed, SlowConsumersPaused: paused,
		}
	}
}

// listenAdmin binds the [admin] listen address; nil when the admin API
// is off.
func listenAdmin(c AdminConfig) (net.Listener, error) {
	if c.Listen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (admin.listen): %w", c.Listen, err)
	}
	return ln, nil
}

// startAdmin serves the admin API on ln (listenAdmin's; nil: off), with
// the [server] tokens (already resolved), the [admin] hosts and
// connection limit, and HTTPS when [admin] tls_cert is set.
func startAdmin(cfg Config, ln net.Listener, b *appliance.Broker, m *admin.Metrics, srv *server.Server, bridges func() []admin.BridgeStats,
	uplinks func() []uplink.Stats, cluster *federation.Cluster, group *wal.SyncGroup, log *slog.Logger) (*adminServer, error) {
	if ln == nil {
		log.Info("admin API off: [admin] listen is empty")
		return &adminServer{}, nil
	}
	opts := admin.Options{Tokens: cfg.Server.Tokens, Hosts: adminHosts(cfg.Admin), MaxConnections: cfg.Admin.MaxConnections,
		PublishBytesInFlight: int64(cfg.Admin.PublishBudget),
		Logger:               log, Metrics: m, ServerConnections: srv.Connections, ServerRefused: srv.Refused, ServerStats: serverStats(srv),
		UI:      dashboard.Handler(),
		Version: Version, Bridges: bridges, Uplinks: func() any { return uplinks() },
		Collectors: append([]prometheus.Collector{uplink.Collector(uplinks)}, syncGroupMetrics(group)...),
		Sessions:   func() any { return srv.Sessions() }}
	if cluster != nil {
		opts.Cluster = func() (admin.ClusterView, bool) { return cluster.View(), true }
		opts.ClusterOps = clusterOps{cluster}
	}
	api, err := admin.New(b, opts)
	if err != nil {
		return nil, err
	}
	var tlsConfig *tls.Config
	if cfg.Admin.TLSCert != "" {
		if tlsConfig, err = listenerTLS(cfg.Admin.TLSCert, cfg.Admin.TLSKey); err != nil {
			return nil, fmt.Errorf("admin.tls_cert: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	hs := api.HTTPServer()
	hs.Handler = withFaultAPI(hs.Handler)
	hs.BaseContext = func(net.Listener) context.Context { return ctx }
	hs.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	hs.TLSConfig = tlsConfig
	a := &adminServer{api: api, http: hs, cancel: cancel, served: make(chan error, 1)}
	log.Info("listening", "proto", "admin", "addr", ln.Addr().String(), "auth", len(cfg.Server.Tokens) > 0,
		"tls", tlsConfig != nil, "max_connections", cfg.Admin.MaxConnections)
	if len(cfg.Server.Tokens) == 0 && !IsLoopback(cfg.Admin.Listen) {
		log.Warn("INSECURE: the admin API serves off loopback without tokens ([admin] insecure = true): "+
			"anyone who reaches it can read, publish, ack and delete", "addr", cfg.Admin.Listen)
	}
	limited := api.Listener(ln)
	go func() {
		var err error
		if tlsConfig != nil {
			err = hs.ServeTLS(limited, "", "") // the certificate is in TLSConfig
		} else {
			err = hs.Serve(limited)
		}
		if !errors.Is(err, http.ErrServerClosed) {
			a.served <- err
		}
		close(a.served)
	}()
	return a, nil
}

// adminHosts are the names the admin API answers to besides localhost
// and IP addresses: the listen address's host, the machine's host name,
// and [admin] hosts.
func adminHosts(c AdminConfig) []string {
	var hosts []string
	if host, _, err := net.SplitHostPort(c.Listen); err == nil && host != "" {
		if _, err := netip.ParseAddr(host); err != nil {
			hosts = append(hosts, host)
		}
	}
	if name, err := os.Hostname(); err == nil && name != "" {
		hosts = append(hosts, name)
	}
	return append(hosts, c.Hosts...)
}

// listenerTLS is the TLS of a listener serving certFile and keyFile:
// TLS 1.3 preferred, TLS 1.2 with the AEAD suites only, as on the cluster
// port (federation.AEADSuites).
func listenerTLS(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		CipherSuites: federation.AEADSuites}, nil
}

// sampleHistory samples the queues' figures for the admin API's history
// every admin.DefaultHistoryInterval until the returned stop is called.
func (a *adminServer) sampleHistory() (stop func()) {
	if a.api == nil {
		return func() {}
	}
	t := time.NewTicker(admin.DefaultHistoryInterval)
	done := make(chan struct{})
	ended := make(chan struct{})
	a.api.Sample(time.Now())
	go func() {
		defer close(ended)
		for {
			select {
			case now := <-t.C:
				a.api.Sample(now)
			case <-done:
				return
			}
		}
	}()
	return func() {
		t.Stop()
		close(done)
		<-ended
	}
}

// shutdown ends the requests in progress (a get waiting for messages
// returns at once) and stops the admin server.
func (a *adminServer) shutdown(ctx context.Context, log *slog.Logger) {
	if a.http == nil {
		return
	}
	a.cancel()
	if err := a.http.Shutdown(ctx); err != nil {
		log.Warn("admin requests cut short", "err", err)
	}
	if a.served != nil {
		for range a.served {
		}
	}
}
