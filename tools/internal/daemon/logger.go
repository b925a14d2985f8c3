package daemon

import (
	"fmt"
	"io"
	"log/slog"
)

// NewLogger returns the daemon's logger for a log section: text or JSON
// lines on w at the configured level.
func NewLogger(c LogConfig, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.Level)); err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch c.Format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log.format: %q (want text or json)", c.Format)
}
