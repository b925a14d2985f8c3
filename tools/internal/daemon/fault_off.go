//go:build !faultinject

package daemon

import (
	"net/http"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Release builds carry no fault hook: the broker stores on the real file
// system and the admin API is served as it is. fault_inject.go, compiled
// only with -tags faultinject for the acceptance suite, replaces these.

// faultInjection says whether this binary carries the fault hook.
const faultInjection = false

// storageFS is the broker's file system.
func storageFS() vfs.FS { return vfs.Default }

// withFaultAPI returns the admin handler unchanged.
func withFaultAPI(h http.Handler) http.Handler { return h }
