package dashboard

import (
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/fibril-edge/fibril/appliance/admin"
)

// TestDashboardBridges drives the bridges page in headless Chromium: a
// bridge's state, its missing queue and last error show, and the page
// follows the report live once the queue exists and messages flow; it fits
// a 375 px screen.
func TestDashboardBridges(t *testing.T) {
	var mu sync.Mutex
	report := admin.BridgeStats{Name: "site", State: admin.BridgeReconnecting, Blocked: true,
		LastError: "fibril: publish to alerts: not_found", MissingQueues: []string{"alerts"},
		Dropped: map[string]uint64{"not_found": 3},
		URLs:    []string{"nats://127.0.0.1:4222"},
		Routes:  []string{"ingest NATS alerts.> → queue alerts (core)", "egress queue orders → NATS site.orders (JetStream)"}}
	base, _ := startNode(t, admin.Options{Bridges: func() []admin.BridgeStats {
		mu.Lock()
		defer mu.Unlock()
		return []admin.BridgeStats{report}
	}})
	b := startBrowser(t, 1280, 900)
	card := `main[data-page="bridges"] article[data-bridge="site"]`

	b.Do(t, "open the bridges page", chromedp.Navigate(base+"/#/bridges"),
		chromedp.WaitVisible(chromedp.CSS(card+` [data-field="missing-queues"]`)))
	for sel, want := range map[string]string{
		`[data-field="state"]`:          "reconnecting",
		`[data-field="blocked"]`:        "pulling paused",
		`[data-field="missing-queues"]`: "alerts",
		`[data-field="last-error"]`:     "not_found",
		`dd[data-field="dropped"]`:      "3",
		`[data-field="urls"]`:           "nats://127.0.0.1:4222",
		`[data-field="routes"]`:         "egress queue orders → nats site.orders (jetstream)",
	} {
		if got := b.Text(t, card+" "+sel); !strings.Contains(strings.ToLower(got), want) { // badges are upper case by style
			t.Errorf("%s says %q, want %q in it", sel, got, want)
		}
	}
	b.Screenshot(t, "dashboard-bridges-missing.png")

	mu.Lock()
	report.State, report.Blocked, report.MissingQueues, report.LastError = admin.BridgeConnected, false, nil, ""
	report.Received, report.Published, report.JetStreamAcked = 1200, 1200, 1200
	mu.Unlock()
	b.WaitFor(t, "the published count", number(card+` dd[data-field="published"]`)+` === 1200`, textOf(card+` dd[data-field="published"]`))
	b.WaitFor(t, "the missing queue gone", `document.querySelector('`+card+` [data-field="missing-queues"]') === null`, `'still shown'`)
	if got := b.Text(t, card+` [data-field="state"]`); !strings.EqualFold(got, "connected") {
		t.Errorf("state says %q after the reconnect", got)
	}

	b.Do(t, "a 375 px screen", chromedp.EmulateViewport(375, 812), chromedp.Navigate(base+"/#/bridges"),
		chromedp.WaitVisible(chromedp.CSS(card)))
	b.WaitFor(t, "no horizontal overflow at 375 px", `document.documentElement.scrollWidth <= window.innerWidth`,
		`'scrollWidth ' + document.documentElement.scrollWidth + ' innerWidth ' + window.innerWidth`)
	b.Screenshot(t, "dashboard-bridges-375px.png")
	b.CheckNoExceptions(t)
}
