package daemon

import (
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/fibril-edge/fibril/appliance/server"
)

// Reload lets a running daemon take config changes without a restart
// (fibrild reads its config again at SIGHUP, which `systemctl reload`
// sends). What can change live: the tokens ([server] tokens, tokens_file
// and the systemd credential, for the client protocol and the admin API
// alike) and [log] level. A reload that changes anything else is applied
// for those two and logs which sections take effect only at the next
// restart; a config that does not validate is refused whole, and the
// daemon keeps running on what it had.
type Reload struct {
	// Configs delivers the config as read again, with the same flags
	// applied as at start. nil: no reloads.
	Configs <-chan Config
	// Level is the logger's level (NewReloadableLogger), set anew from
	// [log] level. nil: the level stays as started.
	Level *slog.LevelVar
}

// reloadTargets are what a reload changes in the running daemon.
type reloadTargets struct {
	srv   *server.Server
	adm   *adminServer
	level *slog.LevelVar
	// bridges and uplinks stop what runs and start it again from a
	// config (nil: not restarted, as in tests of the rest).
	bridges, uplinks func(Config)
}

// apply applies next (unresolved, as read) over cur (resolved, in
// effect) and returns the config in effect after it.
func (r reloadTargets) apply(cur, next Config, log *slog.Logger) Config {
	resolved, err := next.ResolveTokens(os.Getenv("CREDENTIALS_DIRECTORY"))
	if err == nil {
		err = resolved.Validate()
	}
	if err == nil {
		// The listeners stay as started: the tokens must protect those.
		inEffect := resolved
		inEffect.Server.Listen, inEffect.Admin, inEffect.Cluster = cur.Server.Listen, cur.Admin, cur.Cluster
		err = inEffect.Validate()
	}
	if err != nil {
		log.Error("reload refused: the config does not validate; running on the previous one", "err", err)
		return cur
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(resolved.Log.Level)); err != nil { // Validate checked it
		log.Error("reload refused", "err", fmt.Errorf("log.level: %w", err))
		return cur
	}
	tokens := resolved.Server.Tokens
	if err := r.srv.SetTokens(tokens); err != nil {
		log.Error("reload refused", "err", err)
		return cur
	}
	if r.adm.api != nil {
		if err := r.adm.api.SetTokens(tokens); err != nil { // the same tokens: cannot fail here
			log.Error("reload: the admin API kept its tokens", "err", err)
		}
	}
	if r.level != nil {
		r.level.Set(level)
	}
	applied := cur
	applied.Server.Tokens, applied.Server.TokensFile, applied.Log.Level = tokens, resolved.Server.TokensFile, resolved.Log.Level
	// The bridges and uplinks reach this fibrild with the first token, so
	// they start again when it changed as well as when their own tables
	// did; what they hold unsettled goes back to its queue, as at a stop.
	tokensChanged := !slices.Equal(cur.Server.Tokens, tokens)
	if r.bridges != nil && (tokensChanged || !reflect.DeepEqual(cur.Bridge, resolved.Bridge)) {
		applied.Bridge = resolved.Bridge
		r.bridges(applied)
		log.Info("bridges started again with the reloaded config", "bridges", len(resolved.Bridge.NATS))
	}
	if r.uplinks != nil && (tokensChanged || !reflect.DeepEqual(cur.Uplink, resolved.Uplink)) {
		applied.Uplink = resolved.Uplink
		r.uplinks(applied)
		log.Info("uplinks started again with the reloaded config", "uplinks", len(resolved.Uplink))
	}
	restart := changedSections(applied, resolved)
	log.Info("config reloaded", "tokens", len(tokens), "tokens_changed", tokensChanged,
		"log_level", resolved.Log.Level)
	if len(restart) > 0 {
		log.Warn("config changes that take effect only at the next restart", "sections", strings.Join(restart, ", "))
	}
	return applied
}

// changedSections names the config sections (by their TOML names) that
// differ between a and b.
func changedSections(a, b Config) []string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	t := va.Type()
	var out []string
	for i := range t.NumField() {
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ",")
			out = append(out, name)
		}
	}
	return out
}
