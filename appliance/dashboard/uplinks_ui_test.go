package dashboard

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fibril-edge/fibril/appliance/admin"
)

// uplinkReport and uplinkQueue are the fields of GET /api/uplinks the page
// reads, as federation/uplink's Stats renders them (the dashboard may not
// import federation).
type uplinkReport struct {
	Name      string        `json:"name"`
	To        []string      `json:"to"`
	Remote    string        `json:"remote"`
	State     string        `json:"state"`
	LastError string        `json:"last_error"`
	Window    int           `json:"window"`
	Queues    []uplinkQueue `json:"queues"`
}

type uplinkQueue struct {
	Local            string        `json:"local"`
	Remote           string        `json:"remote"`
	State            string        `json:"state"`
	Reason           string        `json:"reason"`
	LocalDurability  string        `json:"local_durability"`
	RemoteDurability string        `json:"remote_durability"`
	Weakened         bool          `json:"weakened"`
	BacklogMessages  int64         `json:"backlog_messages"`
	BacklogBytes     int64         `json:"backlog_bytes"`
	OldestWaiting    time.Duration `json:"oldest_waiting_ns"`
	InFlight         int           `json:"in_flight"`
	Forwarded        uint64        `json:"forwarded"`
	Duplicates       uint64        `json:"duplicates"`
	Resent           uint64        `json:"resent"`
	Refused          uint64        `json:"refused"`
	LastConfirm      time.Time     `json:"last_confirm"`
}

// TestDashboardUplinks drives the uplinks page in headless Chromium: an
// uplink's configuration shows beside its state, a backing-off link names
// its reason, a weakened promise stands out, and the page follows the
// report live once the link is up and forwarding; it fits a 375 px screen.
func TestDashboardUplinks(t *testing.T) {
	var mu sync.Mutex
	report := uplinkReport{Name: "to-hq", To: []string{"hq1:7420", "hq2:7420"}, State: "backing off",
		LastError: "dial hq1:7420: connection refused", Window: 1024,
		Queues: []uplinkQueue{{Local: "sensors", Remote: "site7-sensors", State: "backing off",
			Reason: "the link is down", LocalDurability: "durable", RemoteDurability: "buffered", Weakened: true,
			BacklogMessages: 5000, BacklogBytes: 512000, OldestWaiting: 90 * time.Second}}}
	base, _ := startNode(t, admin.Options{Uplinks: func() any {
		mu.Lock()
		defer mu.Unlock()
		return []uplinkReport{report}
	}})
	b := startBrowser(t, 1280, 900)
	card := `main[data-page="uplinks"] article[data-uplink="to-hq"]`
	row := card + ` tr[data-queue="sensors"]`

	b.Do(t, "open the uplinks page", chromedp.Navigate(base+"/#/uplinks"),
		chromedp.WaitVisible(chromedp.CSS(row)))
	for sel, want := range map[string]string{
		card + ` [data-field="state"]`:       "backing off",
		card + ` [data-field="remote"]`:      "not connected",
		card + ` [data-field="last-error"]`:  "connection refused",
		card + ` [data-field="config"]`:      "hq1:7420, hq2:7420",
		card + ` [data-field="weakened"]`:    "buffered remote queue",
		row + ` [data-field="queue"]`:        "sensors → site7-sensors",
		row + ` [data-field="queue-state"]`:  "the link is down",
		row + ` [data-field="modes"]`:        "durable → buffered",
		row + ` [data-field="backlog"]`:      "5,000 (500.0 kib)",
		row + ` [data-field="oldest"]`:       "1.5 min",
		row + ` [data-field="last-confirm"]`: "never",
	} {
		if got := b.Text(t, sel); !strings.Contains(strings.ToLower(got), want) {
			t.Errorf("%s says %q, want %q in it", sel, got, want)
		}
	}
	b.Screenshot(t, "dashboard-uplinks-down.png")

	mu.Lock()
	report.State, report.Remote, report.LastError = "connected", "hq2:7420", ""
	q := &report.Queues[0]
	q.State, q.Reason, q.BacklogMessages, q.BacklogBytes, q.OldestWaiting = "connected", "", 12, 1200, 0
	q.Forwarded, q.Resent, q.LastConfirm = 4988, 17, time.Now()
	mu.Unlock()
	b.WaitFor(t, "the forwarded count", number(row+` [data-field="forwarded"]`)+` === 4988`, textOf(row+` [data-field="forwarded"]`))
	for sel, want := range map[string]string{
		card + ` [data-field="state"]`:  "connected",
		card + ` [data-field="remote"]`: "connected to hq2:7420",
		row + ` [data-field="resent"]`:  "17",
		row + ` [data-field="backlog"]`: "12 (",
	} {
		if got := b.Text(t, sel); !strings.Contains(strings.ToLower(got), want) {
			t.Errorf("%s says %q after the reconnect, want %q in it", sel, got, want)
		}
	}

	b.Do(t, "a 375 px screen", chromedp.EmulateViewport(375, 812), chromedp.Navigate(base+"/#/uplinks"),
		chromedp.WaitVisible(chromedp.CSS(row)))
	b.WaitFor(t, "no horizontal overflow at 375 px", `document.documentElement.scrollWidth <= window.innerWidth`,
		`'scrollWidth ' + document.documentElement.scrollWidth + ' innerWidth ' + window.innerWidth`)
	b.Screenshot(t, "dashboard-uplinks-375px.png")
	b.CheckNoExceptions(t)
}
