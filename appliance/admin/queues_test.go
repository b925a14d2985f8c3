package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/fibril-edge/fibril/appliance"
)

// TestDeclareInspectDelete walks a queue's life through the API and every
// error a declare can meet.
func TestDeclareInspectDelete(t *testing.T) {
	f := newFixture(t, Options{})
	q := f.declare(map[string]any{"name": "clicks", "durability": "buffered", "partitions": 2, "max_messages": 100})
	if q.Durability != "buffered" || q.Warning != appliance.BufferedWarning || len(q.Partitions) != 2 || q.Limits.MaxMessages != 100 {
		t.Fatalf("declared %+v", q)
	}

	// A re-declare naming no mode keeps it: 200, not created.
	var rep declareReply
	f.do("POST", "/api/queues", map[string]any{"name": "clicks"}).want(t, http.StatusOK, &rep)
	if rep.Created || rep.Queue.Durability != "buffered" {
		t.Fatalf("re-declare: %+v", rep)
	}

	for _, tc := range []struct {
		name   string
		body   any
		status int
		code   string
	}{
		{"other mode", map[string]any{"name": "clicks", "durability": "durable"}, http.StatusConflict, "mode_conflict"},
		{"other partitions", map[string]any{"name": "clicks", "partitions": 3}, http.StatusConflict, "conflict"},
		{"bad name", map[string]any{"name": "-bad name"}, http.StatusBadRequest, "invalid"},
		{"no name", map[string]any{}, http.StatusBadRequest, "invalid"},
		{"bad durability", map[string]any{"name": "x", "durability": "sometimes"}, http.StatusBadRequest, "invalid"},
		{"bad overflow", map[string]any{"name": "x", "overflow": "spill"}, http.StatusBadRequest, "invalid"},
		{"bad value", map[string]any{"name": "x", "partitions": 1000}, http.StatusBadRequest, "invalid"},
		{"unknown field", map[string]any{"name": "x", "colour": "red"}, http.StatusBadRequest, "invalid"},
		{"not json", "{name:", http.StatusBadRequest, "invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.do("POST", "/api/queues", tc.body).wantError(t, tc.status, tc.code)
		})
	}
	e := f.do("POST", "/api/queues", map[string]any{"name": "clicks", "durability": "durable"}).wantError(t, http.StatusConflict, "mode_conflict")
	if !strings.Contains(e.Error, "buffered") {
		t.Fatalf("conflict message %q does not say the mode in effect", e.Error)
	}

	f.declare(map[string]any{"name": "orders"}) // durable by default
	var list queueList
	f.do("GET", "/api/queues", nil).want(t, http.StatusOK, &list)
	var names []string
	for _, q := range list.Queues {
		names = append(names, q.Name+":"+q.Durability)
	}
	if !slices.Equal(names, []string{"clicks:buffered", "orders:durable"}) || len(list.Failed) != 0 {
		t.Fatalf("list %v failed %v", names, list.Failed)
	}

	var got queueView
	f.do("GET", "/api/queues/orders", nil).want(t, http.StatusOK, &got)
	if got.Name != "orders" || got.Warning != "" || got.AckDeadline != appliance.DefaultAckDeadline.Milliseconds() {
		t.Fatalf("orders: %+v", got)
	}
	f.do("GET", "/api/queues/nope", nil).wantError(t, http.StatusNotFound, "not_found")
	f.do("GET", "/api/queues/-x", nil).wantError(t, http.StatusBadRequest, "invalid")

	f.do("DELETE", "/api/queues/orders", nil).want(t, http.StatusOK, nil)
	f.do("GET", "/api/queues/orders", nil).wantError(t, http.StatusNotFound, "not_found")
	f.do("DELETE", "/api/queues/orders", nil).wantError(t, http.StatusNotFound, "not_found")
	if r := f.do("PATCH", "/api/queues/clicks", nil); r.status != http.StatusMethodNotAllowed {
		t.Fatalf("PATCH: status %d", r.status)
	}
}

// TestQueueViewNamesEveryBoundary checks the JSON field names an operator
// and the dashboard rely on.
func TestQueueViewNamesEveryBoundary(t *testing.T) {
	f := newFixture(t, Options{})
	f.declare(map[string]any{"name": "clicks", "durability": "buffered"})
	f.do("POST", "/api/queues/clicks/messages", map[string]any{"body": "hello"}).want(t, http.StatusOK, nil)
	var q map[string]any
	f.do("GET", "/api/queues/clicks", nil).want(t, http.StatusOK, &q)
	for _, k := range []string{"name", "durability", "warning", "partitions", "messages", "bytes", "ready", "in_flight",
		"consumers", "counters", "dead_letter", "max_deliveries", "ack_deadline_ms", "dedupe_window_ms", "limits"} {
		if _, ok := q[k]; !ok {
			t.Errorf("queue view lacks %q", k)
		}
	}
	counters := q["counters"].(map[string]any)
	for _, k := range []string{"published", "duplicates", "expired", "discarded", "dead_lettered",
		"rejected_full", "rejected_disk", "dropped_overflow", "lost_quarantined"} {
		if _, ok := counters[k]; !ok {
			t.Errorf("counters lack %q", k)
		}
	}
	p := q["partitions"].([]any)[0].(map[string]any)
	for _, k := range []string{"index", "written_next", "durable_next", "unsynced_records", "unsynced_bytes",
		"oldest_unsynced_ms", "last_sync", "sync_pending", "latched", "last_error", "head", "segments",
		"messages", "ready", "in_flight", "quarantined", "lost_records"} {
		if _, ok := p[k]; !ok {
			t.Errorf("partition view lacks %q", k)
		}
	}
	if p["written_next"].(float64) != 1 || counters["published"].(float64) != 1 {
		raw, _ := json.Marshal(q)
		t.Fatalf("after one publish: %s", raw)
	}
}

// A declare names the dedupe table's bounds; the view shows them in
// effect (the defaults when not named) with what the table holds and
// what it evicted.
func TestDeclareDedupeBounds(t *testing.T) {
	f := newFixture(t, Options{})
	q := f.declare(map[string]any{"name": "ids", "dedupe_window_ms": 60000, "dedupe_max_entries": 2, "dedupe_max_bytes": 1 << 20})
	if q.DedupeTable.MaxEntries != 2 || q.DedupeTable.MaxBytes != 1<<20 {
		t.Fatalf("declared %+v", q.DedupeTable)
	}
	for _, id := range []string{"a", "b", "c"} {
		f.do("POST", "/api/queues/ids/messages", map[string]any{"id": id, "body": "x"}).want(t, http.StatusOK, nil)
	}
	var v queueView
	f.do("GET", "/api/queues/ids", nil).want(t, http.StatusOK, &v)
	if d := v.DedupeTable; d.Entries != 2 || d.Evicted != 1 || d.Bytes != 2*(1+appliance.DedupeEntryCost) {
		t.Fatalf("dedupe view %+v, want 2 entries and 1 evicted", d)
	}
	q = f.declare(map[string]any{"name": "plain"})
	if q.DedupeTable.MaxEntries != appliance.DefaultDedupeMaxEntries || q.DedupeTable.MaxBytes != appliance.DefaultDedupeMaxBytes {
		t.Fatalf("defaults not shown: %+v", q.DedupeTable)
	}
	f.do("POST", "/api/queues", map[string]any{"name": "bad", "dedupe_max_bytes": 10}).wantError(t, http.StatusBadRequest, "invalid")
}

// POST /api/queues/{name}/purge discards the ready messages and says how
// many; an unknown queue is 404, and on a cluster node a queue another
// node serves is 409 served_elsewhere, naming that node.
func TestPurgeQueue(t *testing.T) {
	f := newFixture(t, Options{})
	f.declare(map[string]any{"name": "clicks", "partitions": 2})
	for i := range 5 {
		f.do("POST", "/api/queues/clicks/messages", map[string]any{"body": fmt.Sprint(i)}).want(t, http.StatusOK, nil)
	}
	var rep struct {
		Queue  string `json:"queue"`
		Purged int64  `json:"purged"`
	}
	f.do("POST", "/api/queues/clicks/purge", nil).want(t, http.StatusOK, &rep)
	if rep.Queue != "clicks" || rep.Purged != 5 {
		t.Fatalf("purge answered %+v, want 5 purged from clicks", rep)
	}
	var q queueView
	f.do("GET", "/api/queues/clicks", nil).want(t, http.StatusOK, &q)
	if q.Messages != 0 || q.Counters.Purged != 5 {
		t.Fatalf("after the purge: %d messages, purged counter %d", q.Messages, q.Counters.Purged)
	}
	f.do("POST", "/api/queues/nope/purge", nil).wantError(t, http.StatusNotFound, "not_found")

	c := newFixture(t, Options{ClusterOps: &fakeOps{}})
	e := c.do("POST", "/api/queues/orders/purge", nil).wantError(t, http.StatusConflict, "served_elsewhere")
	if !strings.Contains(e.Error, "n2") {
		t.Fatalf("served_elsewhere %q does not name the node serving the queue", e.Error)
	}
}

// POST /api/queues/{name}/mode changes the queue's mode and answers the
// queue in its new mode, each partition applying it; a declare naming the
// old mode then conflicts, as declares never change a mode.
func TestSetMode(t *testing.T) {
	f := newFixture(t, Options{})
	f.declare(map[string]any{"name": "clicks", "durability": "buffered", "partitions": 2})
	f.do("POST", "/api/queues/clicks/messages", map[string]any{"body": "x"}).want(t, http.StatusOK, nil)
	var q queueView
	f.do("POST", "/api/queues/clicks/mode", map[string]any{"durability": "durable"}).want(t, http.StatusOK, &q)
	if q.Durability != "durable" || q.Warning != "" || q.ModeChange.Pending || q.ModeChange.Changed == nil {
		t.Fatalf("after the change: %s, warning %q, %+v", q.Durability, q.Warning, q.ModeChange)
	}
	for _, p := range q.Partitions {
		if p.Mode != "durable" {
			t.Fatalf("partition %d applies %s", p.Index, p.Mode)
		}
	}
	var c confirmView
	f.do("POST", "/api/queues/clicks/messages", map[string]any{"body": "y"}).want(t, http.StatusOK, &c)
	if c.Durability != "durable" {
		t.Fatalf("a publish after the change confirmed %s", c.Durability)
	}
	f.do("POST", "/api/queues", map[string]any{"name": "clicks", "durability": "buffered"}).wantError(t, http.StatusConflict, "mode_conflict")
	f.do("POST", "/api/queues/clicks/mode", map[string]any{"durability": "sometimes"}).wantError(t, http.StatusBadRequest, "invalid")
	f.do("POST", "/api/queues/clicks/mode", map[string]any{}).wantError(t, http.StatusBadRequest, "invalid")
	f.do("POST", "/api/queues/nope/mode", map[string]any{"durability": "durable"}).wantError(t, http.StatusNotFound, "not_found")
}
