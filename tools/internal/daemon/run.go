package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/admin"
	"github.com/fibril-edge/fibril/appliance/server"
	"github.com/fibril-edge/fibril/federation"
	"github.com/fibril-edge/fibril/federation/uplink"
	"github.com/fibril-edge/fibril/internal/sdnotify"
)

// Version is what the daemon reports as its version (the admin API's
// /api/node); the binary that runs it sets it from its own build stamp.
var Version = "dev"

// ShutdownTimeout bounds the graceful part of a shutdown: after it, client
// connections still open are closed at once (the broker still closes
// cleanly).
const ShutdownTimeout = 30 * time.Second

// Run opens the broker and serves the client protocol until ctx ends, then
// shuts down: the server stops admission (Goodbye to every client, replies
// to what was already read, connections closed), then the broker closes
// (every partition checkpointed and synced, Pebble closed). It returns nil
// after a clean shutdown.
//
// Once listening it logs msg="listening" proto=fibril addr=HOST:PORT with
// the bound address (useful with port 0), and the same with proto=admin
// for the admin HTTP API when [admin] listen is set (same tokens as
// [server]). The tokens are [server] tokens with those of tokens_file and
// of the systemd credential "tokens" (ResolveTokens). Under systemd it sends READY=1, watchdog pings and
// STOPPING=1 (see notify.go).
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	return RunReloading(ctx, cfg, log, Reload{})
}

// RunReloading is Run that also takes config reloads (Reload).
func RunReloading(ctx context.Context, cfg Config, log *slog.Logger, reload Reload) error {
	cfg, err := cfg.ResolveTokens(os.Getenv("CREDENTIALS_DIRECTORY"))
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if limit := debug.SetMemoryLimit(-1); limit != math.MaxInt64 {
		log.Info("memory limit", "bytes", limit, "source", "GOMEMLIMIT")
	}
	srvOpts, err := serverOptions(cfg.Server, log)
	if err != nil {
		return err
	}
	dataDir, _ := filepath.Abs(cfg.Storage.DataDir)
	unlock, err := LockDataDir(dataDir)
	if err != nil {
		return err
	}
	defer unlock()
	group := openSyncGroup(dataDir, log)
	defer func() { _ = group.Close() }()
	metrics := admin.NewMetrics()
	if faultInjection {
		log.Warn("storage fault injection compiled in (-tags faultinject): a test build, never for production")
	}
	// The client listener opens first: a cluster node publishes its
	// address in the member list.
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Server.Listen, err)
	}
	// Every listener is bound before any queue is opened: a port that is
	// taken fails the start at once, not after a long recovery.
	adminLn, err := listenAdmin(cfg.Admin)
	if err != nil {
		_ = ln.Close()
		return err
	}
	closeListeners := func() {
		_ = ln.Close()
		if adminLn != nil {
			_ = adminLn.Close()
		}
	}
	var cluster *federation.Cluster
	var replication appliance.Replication
	var logDir func(string, int) string
	if cfg.Cluster.Enabled() {
		if cluster, err = openCluster(cfg, ln.Addr().String(), group, log); err != nil {
			closeListeners()
			return err
		}
		replication, logDir = cluster, cluster.LogDir
		if err := joinWithData(ctx, cluster, appliance.Options{DataDir: cfg.Storage.DataDir, FS: storageFS(), Logger: log}, log); err != nil {
			closeListeners()
			return errors.Join(err, closeCluster(cluster))
		}
	}
	b, err := appliance.Open(appliance.Options{
		Replication:     replication,
		LogDir:          logDir,
		FS:              storageFS(),
		SyncGroup:       group,
		Observer:        metrics,
		DataDir:         cfg.Storage.DataDir,
		Logger:          log,
		SegmentSize:     int64(cfg.Storage.SegmentSize),
		TailCacheBytes:  int64(cfg.Storage.TailCache),
		ReadCacheBytes:  zeroOff(cfg.Storage.ReadCache),
		DiskBudgetBytes: int64(cfg.Storage.DiskBudget),
		MinFreeBytes:    zeroOff(cfg.Storage.MinFree),
		CheckpointDelay: time.Duration(cfg.Storage.CheckpointDelay),
	})
	if err != nil {
		closeListeners()
		return errors.Join(fmt.Errorf("open broker in %s: %w", dataDir, err), closeCluster(cluster))
	}
	if cluster != nil {
		cluster.Bind(b)
	}
	log.Info("broker open", "data_dir", dataDir, "queues", len(b.QueueNames()))
	for name, qerr := range b.QueueErrors() {
		log.Error("queue not served", "queue", name, "err", qerr)
	}
	if cluster != nil {
		srvOpts.Cluster = cluster
	}
	srv, err := server.New(b, srvOpts)
	if err != nil {
		closeListeners()
		return errors.Join(err, closeBroker(b, log), closeCluster(cluster))
	}
	log.Info("listening", "proto", "fibril", "addr", ln.Addr().String(), "tls", srvOpts.TLS != nil,
		"auth", len(srvOpts.Tokens) > 0)
	if len(srvOpts.Tokens) == 0 && !IsLoopback(cfg.Server.Listen) {
		log.Warn("INSECURE: the client port serves off loopback without tokens ([server] insecure = true): "+
			"anyone who reaches it can publish, read, ack and delete", "addr", cfg.Server.Listen)
	}
	var running atomic.Pointer[runningBridges] // set once the bridges start
	var runningUp atomic.Pointer[runningUplinks]
	adm, err := startAdmin(cfg, adminLn, b, metrics, srv, func() []admin.BridgeStats { return running.Load().stats() },
		func() []uplink.Stats { return runningUp.Load().stats() }, cluster, group, log)
	if err != nil {
		closeListeners()
		return errors.Join(err, closeBroker(b, log), closeCluster(cluster))
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	bridges, err := startBridges(cfg, loopbackAddr(ln.Addr()), srvOpts.TLS, queueExists(b), log)
	if err != nil { // cannot happen: Validate checked the bridges' options
		adm.shutdown(context.Background(), log)
		return errors.Join(err, srv.Shutdown(context.Background()), closeBroker(b, log), closeCluster(cluster))
	}
	running.Store(bridges)
	uplinks, err := startUplinks(cfg, loopbackAddr(ln.Addr()), srvOpts.TLS, b, log)
	if err != nil { // cannot happen: Validate checked the uplinks' options
		bridges.stop()
		adm.shutdown(context.Background(), log)
		return errors.Join(err, srv.Shutdown(context.Background()), closeBroker(b, log), closeCluster(cluster))
	}
	runningUp.Store(uplinks)
	notify(log, sdnotify.StateReady) // every queue log recovered, listeners bound
	stopWatchdog := startWatchdog(b.Healthy, log)
	stopHistory := adm.sampleHistory()

	var runErr error
	targets := reloadTargets{srv: srv, adm: adm, level: reload.Level,
		bridges: func(next Config) {
			running.Load().stop()
			nb, err := startBridges(next, loopbackAddr(ln.Addr()), srvOpts.TLS, queueExists(b), log)
			if err != nil { // cannot happen: the reload validated them
				log.Error("bridges not started again", "err", err)
				nb = &runningBridges{cancel: func() {}}
			}
			running.Store(nb)
		},
		uplinks: func(next Config) {
			runningUp.Load().stop()
			nu, err := startUplinks(next, loopbackAddr(ln.Addr()), srvOpts.TLS, b, log)
			if err != nil { // cannot happen: the reload validated them
				log.Error("uplinks not started again", "err", err)
				nu = &runningUplinks{cancel: func() {}}
			}
			runningUp.Store(nu)
		}}
	for running := true; running; {
		select {
		case next := <-reload.Configs:
			cfg = targets.apply(cfg, next, log)
			continue
		case <-ctx.Done():
			log.Info("shutting down", "cause", context.Cause(ctx))
		case err := <-served:
			runErr = fmt.Errorf("serve: %w", err)
			served = nil
			log.Error("server failed; shutting down", "err", err)
		case err := <-adm.served:
			runErr = fmt.Errorf("serve admin: %w", err)
			adm.served = nil
			log.Error("admin server failed; shutting down", "err", err)
		}
		running = false
	}
	notify(log, sdnotify.StateStopping)
	stopWatchdog()
	stopHistory()
	runningUp.Load().stop() // before the server: they ack through it
	running.Load().stop()   // before the server: they ack and nack through it
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	adm.shutdown(sctx, log)
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("client connections closed before they finished", "err", err)
	}
	if served != nil {
		<-served // ErrServerClosed
	}
	if err := errors.Join(closeBroker(b, log), closeCluster(cluster)); err != nil {
		return errors.Join(runErr, err)
	}
	log.Info("stopped")
	return runErr
}

func closeBroker(b *appliance.Broker, log *slog.Logger) error {
	start := time.Now()
	if err := b.Close(); err != nil {
		return fmt.Errorf("close broker: %w", err)
	}
	log.Info("broker closed: logs synced, metadata closed", "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// minFree maps the config's min_free (0: off) to the broker's option
// (0: default, negative: off).
// zeroOff maps a size whose 0 means off to the broker's option, where 0
// means the default and a negative value off.
func zeroOff(s Size) int64 {
	if s == 0 {
		return -1
	}
	return int64(s)
}

func serverOptions(c ServerConfig, log *slog.Logger) (server.Options, error) {
	o := server.Options{
		Addr:      c.Listen,
		Tokens:    c.Tokens,
		MaxFrame:  int(c.MaxFrame),
		Heartbeat: time.Duration(c.Heartbeat),
		Logger:    log,

		MaxConnections:       c.MaxConnections,
		MaxPreHello:          c.MaxPreHello,
		MaxPreHelloPerSource: c.MaxPreHelloPerSource,
		PressureHelloTimeout: time.Duration(c.PressureHelloTimeout),
		DeliveryBudget:       int64(c.DeliveryBudget),
		SlowConsumerGrace:    time.Duration(c.SlowConsumerGrace),
	}
	if o.DeliveryBudget == 0 {
		o.DeliveryBudget = -1 // 0 in the config turns the budget off
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = -1 // 0s in the config turns heartbeats off
	}
	if c.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
		if err != nil {
			return o, fmt.Errorf("server.tls_cert: %w", err)
		}
		// The same TLS settings as the cluster and admin ports: 1.3
		// preferred, 1.2 with AEAD suites only.
		o.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, CipherSuites: federation.AEADSuites}
	}
	return o, o.Validate()
}
