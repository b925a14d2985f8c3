package admin

import (
	"net/http"
	"testing"
)

// TestHostCheck: a request for a name that is not the listener's own (a
// DNS rebinding page's) is refused with 421 on every path, the API, the
// probes, /metrics and the UI alike, and changes nothing; localhost, IP
// literals and the names in Options.Hosts are served, with any port and
// in any case.
func TestHostCheck(t *testing.T) {
	f := newFixture(t, Options{Hosts: []string{"fibril.lan", "Gateway-7."}})
	for _, host := range []string{"localhost", "localhost:7421", "LOCALHOST.", "127.0.0.1", "127.0.0.1:80", "10.1.2.3:7421",
		"[::1]:7421", "[::1]", "fibril.lan", "FIBRIL.LAN:8080", "gateway-7", "gateway-7.:1"} {
		f.doWith("GET", "/healthz", nil, map[string]string{"Host": host}).want(t, http.StatusOK, nil)
	}
	for _, host := range []string{"evil.example", "evil.example:7421", "fibril.lan.evil.example", "localhost.evil.example",
		"xfibril.lan", "127.0.0.1.nip.io"} {
		for _, req := range []struct{ method, path string }{
			{"GET", "/healthz"}, {"GET", "/readyz"}, {"GET", "/metrics"}, {"GET", "/api/queues"},
			{"POST", "/api/queues"}, {"GET", "/"},
		} {
			e := f.doWith(req.method, req.path, map[string]any{"name": "rebound"}, map[string]string{"Host": host}).
				wantError(t, http.StatusMisdirectedRequest, "unknown_host")
			if e.Error == "" {
				t.Fatalf("%s %s for %s: no message", req.method, req.path, host)
			}
		}
	}
	if _, err := f.b.QueueInfo("rebound"); err == nil {
		t.Fatal("a request for a foreign Host declared a queue")
	}
	if _, err := New(f.b, Options{Hosts: []string{"fibril.lan:7421"}}); err == nil {
		t.Fatal("a host with a port was accepted")
	}
	if _, err := New(f.b, Options{Hosts: []string{""}}); err == nil {
		t.Fatal("an empty host was accepted")
	}
}

// TestCrossOriginRefused: a request that changes state is refused with
// 403 when the browser says it comes from another site or its Origin is
// not the listener it was sent to, with tokens set or not, and nothing
// changes; the same request from the listener's own origin, or from a
// client that is not a browser (no Origin, no Sec-Fetch-Site), is served,
// and reads are served whatever their origin.
func TestCrossOriginRefused(t *testing.T) {
	for _, tokens := range [][]string{nil, {"s3cret"}} {
		f := newFixture(t, Options{Tokens: tokens})
		if len(tokens) > 0 {
			f.token = tokens[0]
		}
		f.declare(map[string]any{"name": "victim"})
		f.do("POST", "/api/queues/victim/messages", map[string]any{"body": "kept"}).want(t, http.StatusOK, nil)

		attacks := []map[string]string{
			{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
			{"Origin": "http://127.0.0.1:8000", "Sec-Fetch-Site": "same-site"}, // another port on the same host
			{"Origin": "http://127.0.0.1:8000"},                                // a browser without Sec-Fetch-Site
			{"Origin": "null"},                                                 // a sandboxed frame, a file: page
			{"Sec-Fetch-Site": "cross-site"},
			{"Sec-Fetch-Site": "same-site"},
			{"Origin": "http://evil.example", "Sec-Fetch-Site": "same-origin"}, // the headers disagree: refused
		}
		for _, h := range attacks {
			for _, req := range []struct {
				method, path string
				body         any
			}{
				{"POST", "/api/queues", map[string]any{"name": "evil", "max_bytes": 4 << 30}},
				{"POST", "/api/queues/victim/messages", map[string]any{"body": "injected"}},
				{"POST", "/api/queues/victim/get", map[string]any{"max": 10, "ack": "ack"}},
				{"DELETE", "/api/queues/victim", nil},
				{"PUT", "/api/settings", map[string]any{"storage.background_sync_interval_ms": 0}},
			} {
				f.doWith(req.method, req.path, req.body, h).wantError(t, http.StatusForbidden, "cross_origin")
			}
			f.doWith("GET", "/api/queues/victim", nil, h).want(t, http.StatusOK, nil)
		}
		if _, err := f.b.QueueInfo("evil"); err == nil {
			t.Fatal("a cross-origin request declared a queue")
		}
		var q queueView
		f.do("GET", "/api/queues/victim", nil).want(t, http.StatusOK, &q)
		if q.Messages != 1 || q.Ready != 1 {
			t.Fatalf("after the cross-origin requests the victim queue holds %d messages (%d ready), want the 1 published", q.Messages, q.Ready)
		}
		if got := f.b.Settings().BackgroundSyncIntervalMs; got == 0 {
			t.Fatal("a cross-origin request changed a setting")
		}

		// The dashboard's own requests, and non-browser clients, are served.
		for _, h := range []map[string]string{
			{"Origin": "http://" + testHost, "Sec-Fetch-Site": "same-origin"},
			{"Origin": "http://" + testHost},
			{"Origin": "https://" + testHost}, // through a proxy that ends TLS and keeps Host
			{"Sec-Fetch-Site": "same-origin"},
			{"Sec-Fetch-Site": "none"},
			nil,
		} {
			f.doWith("POST", "/api/queues/victim/messages", map[string]any{"body": "more"}, h).want(t, http.StatusOK, nil)
		}
		f.doWith("POST", "/api/queues", map[string]any{"name": "fibril.lan-queue"},
			map[string]string{"Host": "localhost", "Origin": "http://localhost"}).want(t, http.StatusCreated, nil)
		f.doWith("POST", "/api/queues/victim/get", map[string]any{"max": 10, "ack": "ack"},
			map[string]string{"Host": "localhost:80", "Origin": "http://LOCALHOST"}).want(t, http.StatusOK, nil)
	}
}
