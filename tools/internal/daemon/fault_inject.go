//go:build faultinject

package daemon

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/fibril-edge/fibril/wal"
)

// This file is compiled only with -tags faultinject, for the acceptance
// suite's storage-failure cases: release builds (make build, make package)
// never contain it (fault_off.go stands in, and a test checks the release
// binary). It wraps the storage file system in pebble's errorfs and adds an
// admin endpoint that arms a fault on one queue's segment files:
//
//	POST /debug/fault {"queue": "q", "op": "write"}   every write fails (EIO)
//	POST /debug/fault {"queue": "q", "op": "sync"}    every fdatasync fails (EIO)
//	POST /debug/fault {"op": "off"}                   disarm
//	GET  /debug/fault                                 the armed fault and how many operations it failed
//
// A sync fault fails whichever sync comes next: the one a durable queue's
// publish waits for, or the background sync of a buffered queue.

// faultInjection says whether this binary carries the fault hook.
const faultInjection = true

// faultInjector is the armed fault; the zero value injects nothing.
type faultInjector struct {
	mu       sync.Mutex // guards the fields below
	queue    string
	op       string // "", "write" or "sync"
	injected int64
}

var faults faultInjector

// faultState is the endpoint's JSON.
type faultState struct {
	Queue    string `json:"queue"`
	Op       string `json:"op"`
	Injected int64  `json:"injected"`
}

// openSyncGroup returns no group in this build: a file system's sync
// would go around the injector, so a sync fault armed on a queue would
// not reach the syncs it shared. Every log syncs its own file here.
func openSyncGroup(string, *slog.Logger) *wal.SyncGroup { return nil }

// storageFS is the broker's file system: the real one behind the injector.
func storageFS() vfs.FS { return errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(faults.maybeError)) }

// inQueueLogs reports whether path is a file of queue's logs: solo,
// queues/<name>/<partition>/<file>; in a cluster, where a node keeps its
// owned and followed logs alike, replicas/<name>/<incarnation>/<partition>/<file>.
func inQueueLogs(path, queue string) bool {
	dir := filepath.Dir(path)
	if filepath.Base(filepath.Dir(dir)) == queue && filepath.Base(filepath.Dir(filepath.Dir(dir))) == "queues" {
		return true
	}
	up := filepath.Dir(filepath.Dir(dir))
	return filepath.Base(up) == queue && filepath.Base(filepath.Dir(up)) == "replicas"
}

// maybeError fails op when it is the armed kind on a segment file of the
// armed queue's logs.
func (f *faultInjector) maybeError(op errorfs.Op) error {
	if !strings.HasSuffix(op.Path, ".seg") {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.op == "" || !inQueueLogs(op.Path, f.queue) {
		return nil
	}
	switch op.Kind {
	case errorfs.OpFileWrite, errorfs.OpFileWriteAt:
		if f.op != "write" {
			return nil
		}
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		if f.op != "sync" {
			return nil
		}
	default:
		return nil
	}
	f.injected++
	return fmt.Errorf("injected %s fault on %s: %w", f.op, op.Path, syscall.EIO)
}

func (f *faultInjector) state() faultState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return faultState{Queue: f.queue, Op: f.op, Injected: f.injected}
}

// withFaultAPI serves /debug/fault beside the admin API.
func withFaultAPI(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/fault", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(faults.state())
	})
	mux.HandleFunc("POST /debug/fault", func(w http.ResponseWriter, r *http.Request) {
		var req faultState
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		switch {
		case req.Op == "off":
			req.Op, req.Queue = "", ""
		case (req.Op == "write" || req.Op == "sync") && req.Queue != "":
		default:
			http.Error(w, `want {"queue": NAME, "op": "write" or "sync"} or {"op": "off"}`, http.StatusBadRequest)
			return
		}
		faults.mu.Lock()
		faults.queue, faults.op = req.Queue, req.Op
		faults.mu.Unlock()
		_ = json.NewEncoder(w).Encode(faults.state())
	})
	mux.Handle("/", h)
	return mux
}
