package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/wal"
)

// TestSettingsGetPut changes one setting, then checks that bad values and
// unknown keys are refused and change nothing.
func TestSettingsGetPut(t *testing.T) {
	f := newFixture(t, Options{})
	var s map[string]any
	f.do("GET", "/api/settings", nil).want(t, http.StatusOK, &s)
	if s["storage.background_sync_interval_ms"] != float64(100) || s["publish.buffered_coalesce"] != "window" {
		t.Fatalf("defaults %v", s)
	}
	var got appliance.Settings
	f.do("PUT", "/api/settings", map[string]any{"storage.background_sync_interval_ms": 50}).want(t, http.StatusOK, &got)
	if got.BackgroundSyncIntervalMs != 50 || got.BufferedCoalesce != "window" || f.b.Settings().BackgroundSyncIntervalMs != 50 {
		t.Fatalf("after put: %+v, broker %+v", got, f.b.Settings())
	}
	f.do("PUT", "/api/settings", map[string]any{"storage.background_sync_interval_ms": -1}).wantError(t, http.StatusBadRequest, "invalid")
	f.do("PUT", "/api/settings", map[string]any{"publish.buffered_coalesce": "never"}).wantError(t, http.StatusBadRequest, "invalid")
	f.do("PUT", "/api/settings", map[string]any{"storage.sync": 1}).wantError(t, http.StatusBadRequest, "invalid")
	f.do("PUT", "/api/settings", map[string]any{"publish.buffered_gap_us": "ten"}).wantError(t, http.StatusBadRequest, "invalid")
	if s := f.b.Settings(); s.BackgroundSyncIntervalMs != 50 || s.BufferedCoalesce != "window" {
		t.Fatalf("a refused put changed the settings: %+v", s)
	}
	if r := f.do("POST", "/api/settings", map[string]any{}); r.status != http.StatusMethodNotAllowed {
		t.Fatalf("POST /api/settings: %d", r.status)
	}
}

// TestHealthAndReadiness checks both probes, and readiness after the
// broker closes.
func TestHealthAndReadiness(t *testing.T) {
	f := newFixture(t, Options{Tokens: []string{"secret"}}) // probes need no token
	f.do("GET", "/healthz", nil).want(t, http.StatusOK, nil)
	var ready map[string]string
	f.do("GET", "/readyz", nil).want(t, http.StatusOK, &ready)
	if ready["status"] != "ready" {
		t.Fatalf("readyz %v", ready)
	}
	if err := f.b.Close(); err != nil {
		t.Fatal(err)
	}
	e := f.do("GET", "/readyz", nil).wantError(t, http.StatusServiceUnavailable, "not_ready")
	if d, _ := e.Details.(map[string]any); d["closed"] != true {
		t.Fatalf("details %v", e.Details)
	}
	f.do("GET", "/healthz", nil).want(t, http.StatusOK, nil)
}

// TestAuth checks bearer tokens on the API and /metrics.
func TestAuth(t *testing.T) {
	f := newFixture(t, Options{Tokens: []string{"one", "two"}})
	for _, path := range []string{"/api/queues", "/api/settings", "/api/node", "/metrics"} {
		for _, tok := range []string{"", "three", "on"} {
			f.token = tok
			r := f.do("GET", path, nil)
			if r.header.Get("WWW-Authenticate") == "" {
				t.Fatalf("%s with token %q: no WWW-Authenticate", path, tok)
			}
			r.wantError(t, http.StatusUnauthorized, "unauthorized")
		}
		for _, tok := range []string{"one", "two"} {
			f.token = tok
			f.do("GET", path, nil).want(t, http.StatusOK, nil)
		}
	}
	f.token = ""
	req := httptest.NewRequest("GET", "http://"+testHost+"/api/queues", nil)
	req.Header.Set("Authorization", "Basic b25lOg==")
	w := httptest.NewRecorder()
	f.srv.Handler().ServeHTTP(w, req)
	if w.Code != http.StatusUnauthorized {
		t.Fatalf("basic auth: %d", w.Code)
	}
	if _, err := New(f.b, Options{Tokens: []string{""}}); err == nil {
		t.Fatal("an empty token was accepted")
	}
}

// TestUIMounted checks that the dashboard hook serves "/" and leaves the
// API alone.
func TestUIMounted(t *testing.T) {
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "dashboard "+r.URL.Path) })
	f := newFixture(t, Options{UI: ui})
	if r := f.do("GET", "/queues/clicks", nil); r.status != http.StatusOK || string(r.body) != "dashboard /queues/clicks" {
		t.Fatalf("ui: %d %s", r.status, r.body)
	}
	f.do("GET", "/api/queues", nil).want(t, http.StatusOK, nil)
}

// TestErrorStatus checks the error table.
func TestErrorStatus(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{appliance.ErrInvalid, 400, "invalid"},
		{appliance.ErrNotFound, 404, "not_found"},
		{appliance.ErrModeConflict, 409, "mode_conflict"},
		{appliance.ErrConflict, 409, "conflict"},
		{appliance.ErrStaleTag, 409, "stale_tag"},
		{appliance.ErrTooLarge, 413, "too_large"},
		{appliance.ErrQueueFull, 429, "queue_full"},
		{appliance.ErrDiskFull, 507, "disk_full"},
		{appliance.ErrUnavailable, 503, "unavailable"},
		{wal.ErrLatched, 503, "unavailable"},
		{appliance.ErrClosed, 503, "closed"},
		{context.Canceled, 503, "canceled"},
		{context.DeadlineExceeded, 504, "timeout"},
		{errors.New("boom"), 500, "internal"},
	} {
		status, code, _ := StatusOf(fmt.Errorf("wrapped: %w", tc.err))
		if status != tc.status || code != tc.code {
			t.Errorf("%v: %d %s, want %d %s", tc.err, status, code, tc.status, tc.code)
		}
	}
}
