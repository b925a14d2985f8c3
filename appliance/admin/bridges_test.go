package admin

import (
	"net/http"
	"testing"
)

// GET /api/bridges answers what the daemon's bridges report, behind the
// same auth as the rest of the API, and an empty list without bridges.
func TestBridges(t *testing.T) {
	f := newFixture(t, Options{})
	var none struct {
		Bridges []map[string]any `json:"bridges"`
	}
	f.do("GET", "/api/bridges", nil).want(t, http.StatusOK, &none)
	if none.Bridges == nil || len(none.Bridges) != 0 {
		t.Fatalf("without bridges: %+v", none)
	}

	report := []map[string]any{{"name": "site-nats", "state": "connected", "published": 42}}
	f = newFixture(t, Options{Tokens: []string{"s3cret"}, Bridges: func() any { return report }})
	f.do("GET", "/api/bridges", nil).wantError(t, http.StatusUnauthorized, "unauthorized")
	f.token = "s3cret"
	var got struct {
		Bridges []map[string]any `json:"bridges"`
	}
	f.do("GET", "/api/bridges", nil).want(t, http.StatusOK, &got)
	if len(got.Bridges) != 1 || got.Bridges[0]["name"] != "site-nats" || got.Bridges[0]["published"] != float64(42) {
		t.Fatalf("bridges %+v", got.Bridges)
	}
}
