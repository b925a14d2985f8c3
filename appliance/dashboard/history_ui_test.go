package dashboard

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/fibril-edge/fibril/appliance/admin"
)

// The queue page and the node page chart the history the admin API keeps:
// with samples taken between publishes, the publish rate and the backlog
// charts have points and show the newest figures.
func TestHistoryChartsInBrowser(t *testing.T) {
	base, _, srv := startNodeServer(t, admin.Options{HistoryInterval: time.Second}, nil)
	b := startBrowser(t, 1280, 900)
	const queue = "clicks"
	apiCall(t, "POST", base+"/api/queues", map[string]any{"name": queue}, http.StatusCreated, nil)
	t0 := time.Now().Add(-time.Minute)
	for i := range 4 {
		for j := range 10 * i {
			publish(t, base, queue, fmt.Sprint(i, j))
		}
		srv.Sample(t0.Add(time.Duration(i) * time.Second))
	}
	// 0, 10, 20, 30 publishes a second apart: the last rate is 30/s, the
	// backlog 60.
	b.Do(t, "open the queue page", chromedp.Navigate(base+"/#/queues/"+queue),
		chromedp.WaitVisible(chromedp.CSS(`main[data-page="queue"] figure[data-chart="chart-publish"] polyline`)))
	if got := b.Text(t, `[data-field="chart-publish"]`); got != "30/s" && got != "30.0/s" {
		t.Errorf("the publish chart's newest rate says %q, want 30/s", got)
	}
	if got := b.Text(t, `[data-field="chart-backlog"]`); got != "60" {
		t.Errorf("the backlog chart's newest level says %q, want 60", got)
	}
	b.Screenshot(t, "dashboard-queue-history.png")
	b.Do(t, "open the node page", chromedp.Navigate(base+"/#/node"),
		chromedp.WaitVisible(chromedp.CSS(`main[data-page="node"] figure[data-chart="chart-backlog"] polyline`)))
	if got := b.Text(t, `[data-field="chart-backlog"]`); got != "60" {
		t.Errorf("the node's backlog chart says %q, want 60", got)
	}
	b.CheckNoExceptions(t)
}
