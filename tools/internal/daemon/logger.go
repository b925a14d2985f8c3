package daemon

import (
	"fmt"
	"io"
	"log/slog"
)

// NewLogger returns the daemon's logger for a log section: text or JSON
// lines on w at the configured level.
func NewLogger(c LogConfig, w io.Writer) (*slog.Logger, error) {
	log, _, err := NewReloadableLogger(c, w)
	return log, err
}

// NewReloadableLogger is NewLogger with the level a reload can change
// (Reload.Level).
func NewReloadableLogger(c LogConfig, w io.Writer) (*slog.Logger, *slog.LevelVar, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.Level)); err != nil {
		return nil, nil, fmt.Errorf("log.level: %w", err)
	}
	lv := new(slog.LevelVar)
	lv.Set(level)
	opts := &slog.HandlerOptions{Level: lv}
	switch c.Format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), lv, nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), lv, nil
	}
	return nil, nil, fmt.Errorf("log.format: %q (want text or json)", c.Format)
}
