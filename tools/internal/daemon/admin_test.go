package daemon

import (
	"github.com/fibril-edge/fibril/internal/wiretest"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRunServesAdmin checks that Run serves the admin API on [admin]
// listen with the [server] tokens, counts wire connections in /metrics,
// and stops it on shutdown.
func TestRunServesAdmin(t *testing.T) {
	cfg := Default()
	cfg.Server.Listen = "127.0.0.1:0"
	cfg.Server.Tokens = []string{"tok"}
	cfg.Storage.DataDir = t.TempDir()
	cfg.Storage.MinFree = 0
	addr, adminAddr, stop := startRunAdmin(t, cfg)
	hc := &http.Client{Timeout: waitLimit}
	call := func(method, path, token, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+adminAddr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := call("GET", "/healthz", "", ""); code != http.StatusOK {
		t.Fatalf("healthz %d", code)
	}
	if code, _ := call("GET", "/api/queues", "", ""); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", code)
	}
	if code, body := call("POST", "/api/queues", "tok", `{"name":"clicks","durability":"buffered"}`); code != http.StatusCreated {
		t.Fatalf("declare: %d %s", code, body)
	}
	if code, body := call("POST", "/api/queues/clicks/messages", "tok", `{"body":"hi"}`); code != http.StatusOK {
		t.Fatalf("publish: %d %s", code, body)
	}
	wc := wiretest.Dial(t, addr, "tok")
	code, body := call("GET", "/metrics", "tok", "")
	if code != http.StatusOK || !strings.Contains(body, "fibril_connections 1\n") ||
		!strings.Contains(body, "fibril_connections_refused_total 0\n") ||
		!strings.Contains(body, `fibril_confirms_total{mode="buffered",queue="clicks"} 1`) {
		t.Fatalf("metrics %d:\n%s", code, body)
	}
	wc.NC.Close()
	hc.CloseIdleConnections()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", adminAddr, time.Second); err == nil {
		c.Close()
		t.Fatal("admin API still listening after shutdown")
	}
}
