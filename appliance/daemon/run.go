package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/server"
)

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
// the bound address (useful with port 0).
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
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
	b, err := appliance.Open(appliance.Options{
		DataDir:         cfg.Storage.DataDir,
		Logger:          log,
		SegmentSize:     int64(cfg.Storage.SegmentSize),
		TailCacheBytes:  int64(cfg.Storage.TailCache),
		DiskBudgetBytes: int64(cfg.Storage.DiskBudget),
		MinFreeBytes:    minFree(cfg.Storage.MinFree),
	})
	if err != nil {
		return fmt.Errorf("open broker in %s: %w", dataDir, err)
	}
	log.Info("broker open", "data_dir", dataDir, "queues", len(b.QueueNames()))
	for name, qerr := range b.QueueErrors() {
		log.Error("queue not served", "queue", name, "err", qerr)
	}
	srv, err := server.New(b, srvOpts)
	if err != nil {
		return errors.Join(err, closeBroker(b, log))
	}
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return errors.Join(fmt.Errorf("listen on %s: %w", cfg.Server.Listen, err), closeBroker(b, log))
	}
	log.Info("listening", "proto", "fibril", "addr", ln.Addr().String(), "tls", srvOpts.TLS != nil,
		"auth", len(srvOpts.Tokens) > 0)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "cause", context.Cause(ctx))
	case err := <-served:
		runErr = fmt.Errorf("serve: %w", err)
		served = nil
		log.Error("server failed; shutting down", "err", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("client connections closed before they finished", "err", err)
	}
	if served != nil {
		<-served // ErrServerClosed
	}
	if err := closeBroker(b, log); err != nil {
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
func minFree(s Size) int64 {
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
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = -1 // 0s in the config turns heartbeats off
	}
	if c.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
		if err != nil {
			return o, fmt.Errorf("server.tls_cert: %w", err)
		}
		o.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	return o, o.Validate()
}
