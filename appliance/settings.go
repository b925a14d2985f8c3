package appliance

import (
	"errors"
	"fmt"
	"time"
)

// Settings are the runtime settings, persisted in the metadata store and
// applied live.
type Settings struct {
	// BackgroundSyncIntervalMs is the target time between background syncs
	// of every queue log; 0 turns the timer off and leaves syncing to the
	// operating system (no bound on how long a confirmed buffered message
	// stays unsynced). Default 100.
	BackgroundSyncIntervalMs int `json:"storage.background_sync_interval_ms"`
	// BufferedCoalesce is how buffered queues end a publish batch that
	// gathered while the one before was appended: "window" (at once, the
	// default) or "gap" (after a quiet gap). A publish that finds its
	// partition idle goes at once in both. Durable queues always use the
	// window.
	BufferedCoalesce string `json:"publish.buffered_coalesce"`
	// BufferedGapUs is the quiet gap in microseconds. Default 100.
	BufferedGapUs int `json:"publish.buffered_gap_us"`
}

// DefaultSettings are the settings of a new broker.
func DefaultSettings() Settings {
	return Settings{BackgroundSyncIntervalMs: 100, BufferedCoalesce: "window", BufferedGapUs: 100}
}

// Validate reports every value out of range.
func (s Settings) Validate() error {
	var errs []error
	if s.BackgroundSyncIntervalMs < 0 || s.BackgroundSyncIntervalMs > 60_000 {
		errs = append(errs, fmt.Errorf("storage.background_sync_interval_ms %d (0-60000)", s.BackgroundSyncIntervalMs))
	}
	if s.BufferedCoalesce != "gap" && s.BufferedCoalesce != "window" {
		errs = append(errs, fmt.Errorf("publish.buffered_coalesce %q (gap or window)", s.BufferedCoalesce))
	}
	if s.BufferedGapUs < 1 || s.BufferedGapUs > 100_000 {
		errs = append(errs, fmt.Errorf("publish.buffered_gap_us %d (1-100000)", s.BufferedGapUs))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// BackgroundSyncInterval is the setting as a duration; 0 means off.
func (s Settings) BackgroundSyncInterval() time.Duration {
	return time.Duration(s.BackgroundSyncIntervalMs) * time.Millisecond
}

// Settings returns the settings in force.
func (b *Broker) Settings() Settings { return *b.settings.Load() }

// UpdateSettings validates, persists and applies new settings to every
// open queue log.
func (b *Broker) UpdateSettings(s Settings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.meta.putJSON(settingsKey, s); err != nil {
		return err
	}
	b.settings.Store(&s)
	for _, q := range b.queues {
		for _, p := range q.parts {
			if err := p.log.SetBackgroundSyncInterval(s.BackgroundSyncInterval()); err != nil {
				return fmt.Errorf("apply settings to %s/%d: %w", q.cfg().Name, p.idx, err)
			}
		}
	}
	if o, ok := b.opts.Replication.(SettingsObserver); ok {
		o.SettingsChanged(s)
	}
	b.log.Info("runtime settings changed", "settings", s)
	return nil
}

// publishGap is the quiet gap that ends a publish batch, or 0 for the
// window.
func (b *Broker) publishGap(d Durability) time.Duration {
	s := b.settings.Load()
	if d != Buffered || s.BufferedCoalesce != "gap" {
		return 0
	}
	return time.Duration(s.BufferedGapUs) * time.Microsecond
}
