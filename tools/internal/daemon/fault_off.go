//go:build !faultinject

package daemon

import (
	"log/slog"
	"net/http"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fibril-edge/fibril/wal"
)

// Release builds carry no fault hook: the broker stores on the real file
// system and the admin API is served as it is. fault_inject.go, compiled
// only with -tags faultinject for the acceptance suite, replaces these.

// faultInjection says whether this binary carries the fault hook.
const faultInjection = false

// openSyncGroup opens the node's sync group on the data directory's file
// system: the queue logs and copies that sync at the same moment share
// one syncfs (wal.SyncGroup). Where the kernel's syncfs cannot report errors
// the node goes on without one, each log syncing its own file.
func openSyncGroup(dataDir string, log *slog.Logger) *wal.SyncGroup {
	g, err := wal.NewSyncGroup(dataDir, wal.SyncGroupOptions{})
	if err != nil {
		log.Warn("background syncs not grouped: each log syncs its own file", "err", err)
		return nil
	}
	return g
}

// storageFS is the broker's file system.
func storageFS() vfs.FS { return vfs.Default }

// withFaultAPI returns the admin handler unchanged.
func withFaultAPI(h http.Handler) http.Handler { return h }
