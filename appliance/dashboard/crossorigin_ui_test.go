package dashboard

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/fibril-edge/fibril/appliance/admin"
)

// seenRequest is a request the admin server got and how it answered.
type seenRequest struct {
	method, path, origin, site string
	status                     int
}

// requestLog records what the admin server answered, for a test to
// check that a page's requests did arrive and were refused.
type requestLog struct {
	mu   sync.Mutex
	seen []seenRequest
}

func (l *requestLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		l.mu.Lock()
		l.seen = append(l.seen, seenRequest{r.Method, r.URL.Path, r.Header.Get("Origin"), r.Header.Get("Sec-Fetch-Site"), sw.status})
		l.mu.Unlock()
	})
}

// from returns the requests that came with Origin origin.
func (l *requestLog) from(origin string) []seenRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []seenRequest
	for _, s := range l.seen {
		if s.origin == origin {
			out = append(out, s)
		}
	}
	return out
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// attackPage is a page of another origin that tries to change the broker
// through the admin API at %[1]s: "simple" fetches (no-cors, a text/plain
// body, so no CORS preflight stands in the way) that declare a 4 GiB
// queue, publish, and fetch-and-ack a queue's messages, and a JSON declare
// in cors mode. window.attack resolves to what each fetch did.
const attackPage = `<!doctype html><title>elsewhere</title><script>
const admin = %[1]q;
async function attempt(name, path, body, init) {
  try {
    await fetch(admin + path, Object.assign({method: 'POST', mode: 'no-cors', body: JSON.stringify(body)}, init || {}));
    return name + ': sent';
  } catch (e) {
    return name + ': ' + e.message;
  }
}
window.attack = (async () => [
  await attempt('declare', '/api/queues', {name: 'evil', max_bytes: 4294967296}),
  await attempt('publish', '/api/queues/victim/messages', {body: 'injected'}),
  await attempt('get and ack', '/api/queues/victim/get', {max: 100, ack: 'ack'}),
  await attempt('json declare', '/api/queues', {name: 'evil-json'}, {mode: 'cors', headers: {'Content-Type': 'application/json'}}),
].join('\n'))();
</script>`

// TestCrossOriginPageInBrowser: a page served from another origin
// (another port on 127.0.0.1) makes Chromium send POSTs to the admin API
// that would declare a queue, publish and ack a queue's messages away.
// The admin server gets them and refuses each with 403, and the API shows
// nothing changed. The dashboard, from its own origin, still declares a
// queue with the same kind of request.
func TestCrossOriginPageInBrowser(t *testing.T) {
	var log requestLog
	base, _ := startNodeWith(t, admin.Options{}, log.wrap)
	apiCall(t, "POST", base+"/api/queues", map[string]any{"name": "victim"}, http.StatusCreated, nil)
	const kept = 3
	for i := range kept {
		publish(t, base, "victim", fmt.Sprintf("kept %d", i))
	}
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, attackPage, base)
	}))
	t.Cleanup(evil.Close)

	b := startBrowser(t, 800, 600)
	b.Do(t, "open the page of another origin", chromedp.Navigate(evil.URL))
	results, err := chromedp.Run(b.Ctx, chromedp.Evaluate[string](`window.attack`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("the page's fetches: %v", err)
	}
	t.Logf("the page's fetches:\n%s", results)

	// The requests reached the admin server, and each was refused.
	seen := log.from(evil.URL)
	posts := 0
	for _, s := range seen {
		if s.method == http.MethodPost {
			posts++
			if s.status != http.StatusForbidden {
				t.Errorf("%s %s from %s (Sec-Fetch-Site %q) answered %d, want 403", s.method, s.path, s.origin, s.site, s.status)
			}
		}
	}
	if posts < 3 {
		t.Fatalf("the admin server got %d POSTs from the page, want the 3 simple ones at least: %+v", posts, seen)
	}

	// Nothing changed.
	var list struct {
		Queues []struct {
			Name     string `json:"name"`
			Messages int    `json:"messages"`
			Ready    int    `json:"ready"`
		} `json:"queues"`
	}
	apiCall(t, "GET", base+"/api/queues", nil, http.StatusOK, &list)
	if len(list.Queues) != 1 || list.Queues[0].Name != "victim" || list.Queues[0].Messages != kept || list.Queues[0].Ready != kept {
		t.Fatalf("after the page's requests the queues are %+v, want victim alone with its %d messages ready", list.Queues, kept)
	}
	var got struct {
		Messages []struct {
			Body string `json:"body"`
		} `json:"messages"`
	}
	apiCall(t, "POST", base+"/api/queues/victim/get", map[string]any{"max": kept, "wait_ms": 20000}, http.StatusOK, &got)
	var bodies []string
	for _, m := range got.Messages {
		bodies = append(bodies, m.Body)
	}
	if strings.Join(bodies, ",") != "kept 0,kept 1,kept 2" {
		t.Fatalf("victim holds %q, want the 3 kept messages and nothing injected", bodies)
	}

	// The dashboard's own page declares a queue through its API module.
	b.Do(t, "open the dashboard", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`main[data-page="queues"] h1`)))
	declared, err := chromedp.Run(b.Ctx, chromedp.Evaluate[string](`import(new URL('assets/js/api.js', location.href).href)
		.then(api => api.request('POST', 'api/queues', {name: 'from-dashboard', durability: 'buffered'}))
		.then(r => JSON.stringify(r), e => 'error: ' + e.message)`, chromedp.EvalAwaitPromise))
	if err != nil || !strings.Contains(declared, `"created":true`) {
		t.Fatalf("declare from the dashboard: %s, %v", declared, err)
	}
	var fromDashboard []seenRequest // the browser names the dashboard's origin on its POST
	for _, s := range log.from(base) {
		if s.method == http.MethodPost {
			fromDashboard = append(fromDashboard, s)
		}
	}
	if len(fromDashboard) != 1 || fromDashboard[0].status != http.StatusCreated || fromDashboard[0].site != "same-origin" {
		t.Fatalf("the dashboard's POSTs: %+v, want its declare, same-origin, answered 201", fromDashboard)
	}
	apiCall(t, "GET", base+"/api/queues/from-dashboard", nil, http.StatusOK, nil)
	b.CheckNoExceptions(t)
}
