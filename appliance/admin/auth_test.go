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

// TestAuthTokensOfDifferentLengths: tokens of very different lengths are
// each accepted, and a request whose token is one of them cut short, one
// byte longer, or of the same length with its last byte changed is
// refused; the comparison runs over fixed-size digests, so none of those
// answers depends on how long the token is.
func TestAuthTokensOfDifferentLengths(t *testing.T) {
	tokens := []string{"a", "s3cret-" + strings.Repeat("x", 25), strings.Repeat("long", 16383) + "end"} // 1, 32 and 65535 bytes
	f := newFixture(t, Options{Tokens: tokens})
	for _, tok := range tokens {
		f.token = tok
		f.do("GET", "/api/queues", nil).want(t, http.StatusOK, nil)
		changed := []byte(tok)
		changed[len(changed)-1] ^= 1
		for _, wrong := range []string{tok[:len(tok)-1], tok + "x", string(changed), tok + tokens[0]} {
			if wrong == "" {
				continue // no token at all: covered by TestAuth
			}
			f.token = wrong
			f.do("GET", "/api/queues", nil).wantError(t, http.StatusUnauthorized, "unauthorized")
		}
	}
}

// TestReadyzRedacted: with tokens set, /readyz still answers without one
// (probes carry none), but a request without a token learns only the
// status and how many queues and partitions are wrong, never their names
// or errors; a request with a token gets the details.
func TestReadyzRedacted(t *testing.T) {
	failSyncs := &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			if strings.HasSuffix(op.Path, ".seg") {
				return errors.New("injected sync failure")
			}
		}
		return nil
	})}
	f := newFixtureOn(t, errorfs.Wrap(vfs.NewMem(), failSyncs), Options{Tokens: []string{"s3cret"}})
	f.token = "s3cret"
	f.declare(map[string]any{"name": "payroll-orders", "durability": "durable"})
	failSyncs.On()
	f.do("POST", "/api/queues/payroll-orders/messages", map[string]any{"body": "lost"}).wantError(t, http.StatusServiceUnavailable, "unavailable")

	for _, tok := range []string{"", "wrong"} {
		f.token = tok
		r := f.do("GET", "/readyz", nil)
		e := r.wantError(t, http.StatusServiceUnavailable, "not_ready")
		if bytes.Contains(r.body, []byte("payroll")) || bytes.Contains(r.body, []byte("injected")) {
			t.Fatalf("readyz with token %q names the queue or its error: %s", tok, r.body)
		}
		d, _ := e.Details.(map[string]any)
		if d["latched_partitions"] != 1.0 || d["failed_queues"] != 0.0 || d["closed"] != false {
			t.Fatalf("readyz with token %q: details %v, want the counts", tok, e.Details)
		}
	}
	f.token = "s3cret"
	e := f.do("GET", "/readyz", nil).wantError(t, http.StatusServiceUnavailable, "not_ready")
	d, _ := e.Details.(map[string]any)
	latched, _ := d["latched"].([]any)
	if len(latched) != 1 || !strings.HasPrefix(latched[0].(string), "payroll-orders/0: ") || !strings.Contains(e.Error, "payroll-orders") {
		t.Fatalf("readyz with the token: %s, details %v", e.Error, e.Details)
	}
}
