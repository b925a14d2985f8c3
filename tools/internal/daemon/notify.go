package daemon

import (
	"context"
	"log/slog"
	"time"

	"github.com/fibril-edge/fibril/internal/sdnotify"
)

// Under systemd (Type=notify), Run sends READY=1 once the broker is open
// (every queue log recovered) and the listeners are bound, STOPPING=1 when
// shutdown begins, and, when the unit sets WatchdogSec=, WATCHDOG=1 at half
// the interval for as long as the storage path is alive. Outside systemd
// these are no-ops.

// notify sends a state to systemd, logging (not failing on) an error.
func notify(log *slog.Logger, state string) {
	if err := sdnotify.Notify(state); err != nil {
		log.Warn("systemd notification failed", "state", state, "err", err)
	}
}

// startWatchdog pings systemd's watchdog at half its interval while
// healthy returns nil. It returns a function that stops the pings and
// waits for the loop to end; without a watchdog it starts nothing.
func startWatchdog(health func() error, log *slog.Logger) (stop func()) {
	interval, err := sdnotify.WatchdogInterval()
	if err != nil {
		log.Warn("systemd watchdog ignored", "err", err)
	}
	if interval <= 0 {
		return func() {}
	}
	log.Info("systemd watchdog on", "interval", interval, "ping_every", interval/2)
	ctx, cancel := context.WithCancel(context.Background())
	ticker := time.NewTicker(interval / 2)
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchdogLoop(ctx, ticker.C, health, sdnotify.Watchdog, log)
	}()
	return func() {
		cancel()
		ticker.Stop()
		<-done
	}
}

// watchdogLoop checks health on every tick and pings when it passes. A
// failed check sends nothing, so systemd's watchdog fires and restarts the
// service; a check that never returns (a wedged broker) stops the pings
// too. It returns when ctx ends.
func watchdogLoop(ctx context.Context, tick <-chan time.Time, health, ping func() error, log *slog.Logger) {
	healthy := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		if err := health(); err != nil {
			if healthy {
				log.Error("storage unhealthy: systemd watchdog pings stopped", "err", err)
			}
			healthy = false
			continue
		}
		if !healthy {
			log.Info("storage healthy again: systemd watchdog pings resumed")
		}
		healthy = true
		if err := ping(); err != nil {
			log.Warn("systemd watchdog ping failed", "err", err)
		}
	}
}
