package admin

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestLatchedQueue fails the syncs of a durable queue's log and checks
// what the API reports: the publish is 503, the partition says latched,
// /readyz names it, and the gauge counts it.
func TestLatchedQueue(t *testing.T) {
	failSyncs := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			if strings.HasSuffix(op.Path, ".seg") {
				return errors.New("injected sync failure")
			}
		}
		return nil
	})}
	f := newFixtureOn(t, errorfs.Wrap(vfs.NewMem(), failSyncs), Options{})
	f.declare(map[string]any{"name": "orders", "durability": "durable"})
	f.do("POST", "/api/queues/orders/messages", map[string]any{"body": "kept"}).want(t, http.StatusOK, nil)

	failSyncs.On()
	f.do("POST", "/api/queues/orders/messages", map[string]any{"body": "lost"}).wantError(t, http.StatusServiceUnavailable, "unavailable")

	var q queueView
	f.do("GET", "/api/queues/orders", nil).want(t, http.StatusOK, &q)
	if p := q.Partitions[0]; !p.Latched || p.LastError == "" || q.Unavailable == "" || p.DurableNext != 1 {
		t.Fatalf("latched queue shows %+v", q)
	}
	e := f.do("GET", "/readyz", nil).wantError(t, http.StatusServiceUnavailable, "not_ready")
	d, _ := e.Details.(map[string]any)
	latched, _ := d["latched"].([]any)
	if len(latched) != 1 || !strings.HasPrefix(latched[0].(string), "orders/0: ") {
		t.Fatalf("readyz details %v", e.Details)
	}
	r := f.do("GET", "/metrics", nil).want(t, http.StatusOK, nil)
	if !bytes.Contains(r.body, []byte("fibril_latched_logs 1\n")) {
		t.Fatal("fibril_latched_logs is not 1")
	}
}
