package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/fibril-edge/fibril/internal/browsertest"
)

// adminJSON sends a request to a real fibrild's admin API without an
// Origin (as curl and scripts do) and decodes the answer into out.
func adminJSON(t *testing.T, method, url string, body any, want int, out any) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %s, want %d", method, url, resp.Status, want)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
}

// crossOriginAttack is a page of another origin that tries to change the
// broker through the admin API at %[1]s with "simple" fetches (no-cors, a
// text/plain body: no CORS preflight), as the security review's page did:
// declare a 4 GiB queue, inject a message, fetch and ack a queue's
// messages away.
const crossOriginAttack = `<!doctype html><title>elsewhere</title><script>
const admin = %[1]q;
const send = (path, body) => fetch(admin + path, {method: 'POST', mode: 'no-cors', body: JSON.stringify(body)})
  .then(() => 'sent', e => e.message);
window.attack = (async () => [
  await send('/api/queues', {name: 'evil', max_bytes: 4294967296}),
  await send('/api/queues/victim/messages', {body: 'injected'}),
  await send('/api/queues/victim/get', {max: 100, ack: 'ack'}),
].join(', '))();
</script>`

// TestCrossOriginPageProcess repeats the review's attack on a real
// fibrild whose admin API has no tokens (the default): a page served from
// another origin, in a real Chromium, sends the requests that used to ack
// a queue's messages away, inject one and declare a 4 GiB queue. Nothing
// changes. The dashboard, from the daemon's own origin in the same
// browser, still declares a queue.
func TestCrossOriginPageProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the fibrild binary")
	}
	p := startDaemon(t, buildDaemon(t), "--storage.min_free", "0")
	base := p.Admin
	adminJSON(t, "POST", base+"/api/queues", map[string]any{"name": "victim"}, http.StatusCreated, nil)
	const kept = 3
	for i := range kept {
		adminJSON(t, "POST", base+"/api/queues/victim/messages", map[string]any{"body": fmt.Sprint("kept ", i)}, http.StatusOK, nil)
	}
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, crossOriginAttack, base)
	}))
	t.Cleanup(evil.Close)

	b := browsertest.Start(t, 800, 600)
	b.Do(t, "open the page of another origin", chromedp.Navigate(evil.URL))
	results, err := chromedp.Run(b.Ctx, chromedp.Evaluate[string](`window.attack`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("the page's fetches: %v", err)
	}
	t.Logf("the page's fetches: %s", results)

	var list struct {
		Queues []struct {
			Name     string `json:"name"`
			Messages int    `json:"messages"`
			Ready    int    `json:"ready"`
		} `json:"queues"`
	}
	adminJSON(t, "GET", base+"/api/queues", nil, http.StatusOK, &list)
	if len(list.Queues) != 1 || list.Queues[0].Name != "victim" || list.Queues[0].Messages != kept || list.Queues[0].Ready != kept {
		t.Fatalf("after the page's requests the queues are %+v, want victim alone with its %d messages ready", list.Queues, kept)
	}
	var got struct {
		Messages []struct {
			Body string `json:"body"`
		} `json:"messages"`
	}
	adminJSON(t, "POST", base+"/api/queues/victim/get", map[string]any{"max": kept, "wait_ms": 20000}, http.StatusOK, &got)
	var bodies []string
	for _, m := range got.Messages {
		bodies = append(bodies, m.Body)
	}
	if strings.Join(bodies, ",") != "kept 0,kept 1,kept 2" {
		t.Fatalf("victim holds %q, want the 3 kept messages and nothing injected", bodies)
	}

	b.Do(t, "open the dashboard", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`main[data-page="queues"] h1`)))
	declared, err := chromedp.Run(b.Ctx, chromedp.Evaluate[string](`import(new URL('assets/js/api.js', location.href).href)
		.then(api => api.request('POST', 'api/queues', {name: 'from-dashboard', durability: 'buffered'}))
		.then(r => JSON.stringify(r), e => 'error: ' + e.message)`, chromedp.EvalAwaitPromise))
	if err != nil || !strings.Contains(declared, `"created":true`) {
		t.Fatalf("declare from the dashboard: %s, %v", declared, err)
	}
	adminJSON(t, "GET", base+"/api/queues/from-dashboard", nil, http.StatusOK, nil)
	b.CheckNoExceptions(t)
	p.stop(t)
}
