package daemon

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fibril-edge/fibril/appliance/admin"
	"github.com/fibril-edge/fibril/appliance/server"
	"github.com/fibril-edge/fibril/internal/brokertest"
)

// A daemon started with its admin API off loopback and a token refuses a
// reload that removes every token: the listener in effect changes only at
// a restart, so the reload is checked against it, not against the new
// file's admin.listen (loopback), or the admin API would answer anyone,
// without insecure = true and without the warning.
func TestReloadKeepsTokensOnAnAdminListenerOffLoopback(t *testing.T) {
	b := brokertest.Open(t)
	cur := Default()
	cur.Admin.Listen = "0.0.0.0:7421"
	cur.Server.Tokens = []string{"secret"}
	if err := cur.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(b, server.Options{Tokens: cur.Server.Tokens, Logger: brokertest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	api, err := admin.New(b, admin.Options{Tokens: cur.Server.Tokens, Logger: brokertest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	next := Default() // admin.listen back to 127.0.0.1, no tokens
	got := reloadTargets{srv: srv, adm: &adminServer{api: api}}.apply(cur, next, brokertest.Quiet())
	w := httptest.NewRecorder()
	api.Handler().ServeHTTP(w, httptest.NewRequest("GET", "http://10.0.0.5:7421/api/queues", nil))
	if w.Code == http.StatusOK {
		t.Fatalf("after the reload the admin API still bound to %s answers without a token (tokens now %d)",
			got.Admin.Listen, len(got.Server.Tokens))
	}
}
