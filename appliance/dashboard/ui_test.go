package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/admin"
)

// apiCall sends a JSON request to the admin API and decodes the reply into
// out (if not nil), failing the test on a status other than want.
func apiCall(t *testing.T, method, url string, body any, want int, out any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	got, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, url, res.StatusCode, want, got)
	}
	if out != nil {
		if err := json.Unmarshal(got, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, url, got, err)
		}
	}
}

func setSyncInterval(t *testing.T, base string, ms int) {
	t.Helper()
	var s map[string]any
	apiCall(t, "GET", base+"/api/settings", nil, http.StatusOK, &s)
	s["storage.background_sync_interval_ms"] = ms
	apiCall(t, "PUT", base+"/api/settings", s, http.StatusOK, nil)
}

func syncInterval(t *testing.T, base string) float64 {
	t.Helper()
	var s map[string]any
	apiCall(t, "GET", base+"/api/settings", nil, http.StatusOK, &s)
	v, ok := s["storage.background_sync_interval_ms"].(float64)
	if !ok {
		t.Fatalf("GET /api/settings: no storage.background_sync_interval_ms in %v", s)
	}
	return v
}

// TestDashboardInBrowser drives the dashboard in headless Chromium against
// the admin API: a buffered queue shows as buffered, its unsynced records
// rise while background sync is off and fall to zero once it is back on,
// the settings page changes a setting (and shows a validation error), the
// node page shows the data directory's disk, and every page fits a 375 px
// screen.
func TestDashboardInBrowser(t *testing.T) {
	base, dataDir := startNode(t, admin.Options{})
	b := startBrowser(t, 1280, 900)
	const queue = "clicks.eu-west"
	row := fmt.Sprintf(`tr[data-queue=%q]`, queue)

	// Records stay written, not durable, while background sync is off.
	setSyncInterval(t, base, 0)
	apiCall(t, "POST", base+"/api/queues", map[string]any{"name": queue, "durability": "buffered"}, http.StatusCreated, nil)

	b.Do(t, "open the queues page", chromedp.Navigate(base+"/#/queues"),
		chromedp.WaitVisible(chromedp.CSS(`main[data-page="queues"] `+row+` .badge.buffered`)))
	if got := b.Text(t, row+` .badge.buffered`); !strings.EqualFold(got, "buffered") {
		t.Errorf("mode badge says %q, want buffered", got)
	}
	unsynced := row + ` td[data-field="unsynced-records"]`
	b.WaitFor(t, "no unsynced records before publishing", number(unsynced)+` === 0`, textOf(unsynced))

	const published = 5
	for i := range published {
		publish(t, base, queue, fmt.Sprintf("click %d", i))
	}
	b.WaitFor(t, "unsynced records after publishing with background sync off", number(unsynced)+` > 0`, textOf(unsynced))
	b.WaitFor(t, "the backlog", number(row+` td[data-field="backlog"]`)+` === `+fmt.Sprint(published), textOf(row+` td[data-field="backlog"]`))
	b.WaitFor(t, "a publish rate", textOf(row+` td[data-field="publish-rate"]`)+`.endsWith('/s')`, textOf(row+` td[data-field="publish-rate"]`))
	b.Screenshot(t, "dashboard-queues-unsynced.png")

	setSyncInterval(t, base, 100)
	b.WaitFor(t, "unsynced records back to 0 once background sync is on", number(unsynced)+` === 0`, textOf(unsynced))

	// The queue page.
	b.Do(t, "open the queue page", click(row+` a.name`),
		chromedp.WaitVisible(chromedp.CSS(`main[data-page="queue"] tr[data-partition="0"] td[data-field="durable-next"]`)))
	if got := b.Text(t, `main[data-page="queue"] [data-field="warning"]`); got == "" {
		t.Error("buffered queue shows no loss-window warning")
	}
	b.WaitFor(t, "the durable frontier past the publishes", number(`tr[data-partition="0"] td[data-field="durable-next"]`)+` >= `+fmt.Sprint(published),
		textOf(`tr[data-partition="0"] td[data-field="durable-next"]`))
	b.Screenshot(t, "dashboard-queue.png")

	// The settings page: a value out of range is refused with the server's
	// message; a good one is saved and in force.
	input := `#s-storage-background-sync-interval-ms`
	b.Do(t, "open the settings page", chromedp.Navigate(base+"/#/settings"), chromedp.WaitVisible(chromedp.CSS(`main[data-page="settings"] `+input)))
	b.Do(t, "submit an invalid interval", chromedp.SetValue(chromedp.CSS(input), "-5"), click(`#settings-save`),
		chromedp.WaitVisible(chromedp.CSS(`#settings-result .error`)))
	if got := b.Text(t, `#settings-result .error`); !strings.Contains(got, "background_sync_interval_ms") {
		t.Errorf("validation error says %q, want it to name storage.background_sync_interval_ms", got)
	}
	if got := syncInterval(t, base); got != 100 {
		t.Fatalf("after a refused change the interval is %v, want 100", got)
	}
	b.Do(t, "submit a valid interval", chromedp.SetValue(chromedp.CSS(input), "250"), click(`#settings-save`),
		chromedp.WaitVisible(chromedp.CSS(`#settings-result .ok`)))
	if got := syncInterval(t, base); got != 250 {
		t.Fatalf("GET /api/settings after saving 250 from the page: interval %v", got)
	}
	b.Screenshot(t, "dashboard-settings.png")

	// The node page: the disk as /api/node measured it.
	free := `main[data-page="node"] dd[data-field="disk-free"]`
	b.Do(t, "open the node page", chromedp.Navigate(base+"/#/node"), chromedp.WaitVisible(chromedp.CSS(`main[data-page="node"] table.kv`)))
	b.WaitFor(t, "the disk's free figure", textOf(free)+`.match(/^[0-9.]+ (B|KiB|MiB|GiB|TiB)$/) !== null`, textOf(free))
	if got := b.Text(t, `main[data-page="node"] [data-field="disk-state"]`); !strings.EqualFold(got, "accepting publishes") {
		t.Errorf("disk state says %q, want accepting publishes", got)
	}
	if got := b.Text(t, `main[data-page="node"] [data-field="data-dir"]`); got != dataDir {
		t.Errorf("data directory shows %q, want %s", got, dataDir)
	}
	if got := b.Text(t, `main[data-page="node"] dd[data-field="disk-data"]`); !strings.HasSuffix(got, "B") {
		t.Errorf("data directory use shows %q, want a size", got)
	}
	b.Screenshot(t, "dashboard-node.png")

	// A phone: every page fits 375 px without sideways scrolling.
	b.Do(t, "a 375 px screen", chromedp.EmulateViewport(375, 812))
	for _, page := range []struct{ hash, name, shot string }{
		{"#/node", "node", "dashboard-node-375px.png"},
		{"#/settings", "settings", ""},
		{"#/queues/" + queue, "queue", "dashboard-queue-375px.png"},
		{"#/queues", "queues", "dashboard-queues-375px.png"},
	} {
		b.Do(t, "open "+page.hash+" at 375 px", chromedp.Navigate(base+"/"+page.hash),
			chromedp.WaitVisible(chromedp.CSS(`main[data-page="`+page.name+`"] h1, main[data-page="`+page.name+`"] .card`)))
		b.WaitFor(t, page.hash+" without horizontal overflow at 375 px", `document.documentElement.scrollWidth <= window.innerWidth`,
			`'scrollWidth ' + document.documentElement.scrollWidth + ' innerWidth ' + window.innerWidth`)
		if page.shot != "" {
			b.Screenshot(t, page.shot)
		}
	}

	b.CheckNoExceptions(t)
}

// TestDashboardToken: with tokens configured the page asks for one, and
// uses it once given.
func TestDashboardToken(t *testing.T) {
	base, _ := startNode(t, admin.Options{Tokens: []string{"s3cret"}})
	b := startBrowser(t, 800, 600)
	b.Do(t, "open the page without a token", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`#auth-token`)))
	b.WaitFor(t, "the status to report the refusal", textOf(`#status`)+`.includes('401')`, textOf(`#status`))
	b.Do(t, "give the token", chromedp.SendKeys(chromedp.CSS(`#auth-token`), "s3cret"), click(`#auth button`),
		chromedp.WaitVisible(chromedp.CSS(`main[data-page="queues"] h1`)), chromedp.WaitNotVisible(chromedp.CSS(`#auth`)))
	b.CheckNoExceptions(t)
}

// startNode opens a broker in a temporary directory and serves the admin
// API over it with the dashboard at "/", as fibrild does, with opts'
// tokens and reports (cluster, bridges); it returns the base URL and the
// data directory. Everything closes when the test ends.
func startNode(t *testing.T, opts admin.Options) (base, dataDir string) {
	t.Helper()
	return startNodeWith(t, opts, nil)
}

// startNodeWith is startNode with the admin handler wrapped by wrap (when
// not nil), for tests that watch the requests it gets.
func startNodeWith(t *testing.T, opts admin.Options, wrap func(http.Handler) http.Handler) (base, dataDir string) {
	t.Helper()
	base, dataDir, _ = startNodeServer(t, opts, wrap)
	return base, dataDir
}

// startNodeServer is startNodeWith that also returns the admin server, for
// tests that drive it (its history's Sample).
func startNodeServer(t *testing.T, opts admin.Options, wrap func(http.Handler) http.Handler) (base, dataDir string, srv *admin.Server) {
	t.Helper()
	base, dataDir, srv, _ = startNodeBroker(t, opts, wrap, appliance.Options{})
	return base, dataDir, srv
}

// startNodeBroker is startNodeServer over a broker opened with bopts (its
// data directory, observer and logger set here), which it also returns.
func startNodeBroker(t *testing.T, opts admin.Options, wrap func(http.Handler) http.Handler, bopts appliance.Options) (base, dataDir string, srv *admin.Server, b *appliance.Broker) {
	t.Helper()
	metrics := admin.NewMetrics()
	quiet := slog.New(slog.DiscardHandler)
	dataDir = t.TempDir()
	bopts.DataDir, bopts.Observer, bopts.Logger = dataDir, metrics, quiet
	bopts.CheckpointDelay = time.Hour // no checkpoint syncs the log behind the test's back
	b, err := appliance.Open(bopts)
	if err != nil {
		t.Fatalf("open broker: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("close broker: %v", err)
		}
	})
	opts.UI, opts.Metrics, opts.Logger = Handler(), metrics, quiet
	srv, err = admin.New(b, opts)
	if err != nil {
		t.Fatalf("admin server: %v", err)
	}
	h := srv.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return hs.URL, dataDir, srv, b
}

func publish(t *testing.T, base, queue, body string) {
	t.Helper()
	apiCall(t, "POST", base+"/api/queues/"+queue+"/messages", map[string]any{"body": body}, http.StatusOK, nil)
}
