package admin

import (
	"bytes"
	"net/http"
	"testing"
)

// siteBridge is a bridge report as the daemon passes it in.
func siteBridge() []BridgeStats {
	return []BridgeStats{{Name: "site-nats", State: BridgeConnected, Published: 42, Duplicates: 2,
		Dropped: map[string]uint64{"not_found": 3}, MissingQueues: []string{"temps"}, Blocked: true}}
}

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
	if r := f.do("GET", "/metrics", nil).want(t, http.StatusOK, nil); bytes.Contains(r.body, []byte("fibril_bridge_")) {
		t.Fatal("bridge metrics without bridges")
	}

	f = newFixture(t, Options{Tokens: []string{"s3cret"}, Bridges: siteBridge})
	f.do("GET", "/api/bridges", nil).wantError(t, http.StatusUnauthorized, "unauthorized")
	f.token = "s3cret"
	var got struct {
		Bridges []map[string]any `json:"bridges"`
	}
	f.do("GET", "/api/bridges", nil).want(t, http.StatusOK, &got)
	if len(got.Bridges) != 1 || got.Bridges[0]["name"] != "site-nats" || got.Bridges[0]["published"] != float64(42) {
		t.Fatalf("bridges %+v", got.Bridges)
	}
	if m, _ := got.Bridges[0]["missing_queues"].([]any); len(m) != 1 || m[0] != "temps" {
		t.Fatalf("missing queues %+v", got.Bridges[0])
	}
}

// The bridges' state and counters are in /metrics, labelled by bridge.
func TestBridgeMetrics(t *testing.T) {
	f := newFixture(t, Options{Bridges: siteBridge})
	r := f.do("GET", "/metrics", nil).want(t, http.StatusOK, nil)
	for _, line := range []string{
		`fibril_bridge_state{bridge="site-nats",state="connected"} 1`,
		`fibril_bridge_state{bridge="site-nats",state="reconnecting"} 0`,
		`fibril_bridge_published_total{bridge="site-nats"} 42`,
		`fibril_bridge_duplicates_total{bridge="site-nats"} 2`,
		`fibril_bridge_dropped_total{bridge="site-nats",reason="not_found"} 3`,
		`fibril_bridge_missing_queues{bridge="site-nats"} 1`,
		`fibril_bridge_blocked{bridge="site-nats"} 1`,
		`fibril_bridge_egressed_total{bridge="site-nats"} 0`,
	} {
		if !bytes.Contains(r.body, []byte(line+"\n")) {
			t.Errorf("scrape lacks %s", line)
		}
	}
}
