package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/internal/await"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/internal/leakcheck"
)

// TestMain checks that every goroutine the tests started has ended.
func TestMain(m *testing.M) { leakcheck.Main(m) }

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fixture is a broker on an in-memory file system behind an admin server.
type fixture struct {
	t     *testing.T
	b     *appliance.Broker
	srv   *Server
	token string // sent as a bearer token when set
}

func newFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	return newFixtureOn(t, vfs.NewMem(), opts)
}

// newFixtureOn is newFixture on a given file system.
func newFixtureOn(t *testing.T, fs vfs.FS, opts Options) *fixture {
	t.Helper()
	return newFixtureWith(t, appliance.Options{DataDir: "data", FS: fs, MinFreeBytes: -1}, opts)
}

// newFixtureWith is newFixture over a broker opened with bopts (its logger
// and observer set here).
func newFixtureWith(t *testing.T, bopts appliance.Options, opts Options) *fixture {
	t.Helper()
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics()
	}
	logger := slog.New(slog.DiscardHandler)
	bopts.Logger, bopts.Observer = logger, opts.Metrics
	b, err := appliance.Open(bopts)
	if err != nil {
		t.Fatalf("open broker: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	opts.Logger = logger
	srv, err := New(b, opts)
	if err != nil {
		t.Fatalf("new admin server: %v", err)
	}
	return &fixture{t: t, b: b, srv: srv}
}

// response is a recorded reply.
type response struct {
	status int
	header http.Header
	body   []byte
}

// testHost is the Host the fixture's requests carry: the listener's
// default address.
const testHost = "127.0.0.1:7421"

// do sends a request through the handler; body is marshalled unless it is
// a string (sent as is).
func (f *fixture) do(method, path string, body any) response {
	f.t.Helper()
	return f.doWith(method, path, body, nil)
}

// doWith is do with headers set on the request (a "Host" entry sets its
// Host).
func (f *fixture) doWith(method, path string, body any, header map[string]string) response {
	f.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			f.t.Fatal(err)
		}
		r = bytes.NewReader(raw)
	}
	req := httptest.NewRequestWithContext(testCtx(f.t), method, "http://"+testHost+path, r)
	if f.token != "" {
		req.Header.Set("Authorization", "Bearer "+f.token)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	f.srv.Handler().ServeHTTP(w, req)
	return response{status: w.Code, header: w.Header(), body: w.Body.Bytes()}
}

// want checks the status and decodes the body into v (if not nil).
func (r response) want(t *testing.T, status int, v any) response {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	if v != nil {
		if err := json.Unmarshal(r.body, v); err != nil {
			t.Fatalf("decode %s: %v", r.body, err)
		}
	}
	return r
}

// wantError checks an error reply: status, JSON body with its code.
func (r response) wantError(t *testing.T, status int, code string) errorBody {
	t.Helper()
	var e errorBody
	r.want(t, status, &e)
	if e.Code != code || e.Error == "" {
		t.Fatalf("error body %s, want code %q and a message", r.body, code)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type %q", ct)
	}
	return e
}

// declare creates a queue through the API.
func (f *fixture) declare(req map[string]any) queueView {
	f.t.Helper()
	var rep declareReply
	f.do("POST", "/api/queues", req).want(f.t, http.StatusCreated, &rep)
	return rep.Queue
}

// waitFor polls cond until it holds: for state another goroutine applies
// (settles go through the log) with no event to wait on.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	await.Until(t, testCtx(t), what, cond)
}
