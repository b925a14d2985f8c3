package dashboard

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/fibril-edge/fibril/appliance/admin"
)

// The queue page's actions, in Chromium: a purge and a change of mode are
// each confirmed on the page first (cancel changes nothing), then done
// through the admin API, with the outcome shown; the API then shows the
// queue emptied and in its new mode.
func TestQueueActionsInBrowser(t *testing.T) {
	base, _ := startNode(t, admin.Options{})
	b := startBrowser(t, 1280, 900)
	const queue = "orders"
	apiCall(t, "POST", base+"/api/queues", map[string]any{"name": queue, "durability": "buffered"}, http.StatusCreated, nil)
	for _, m := range []string{"a", "b", "c"} {
		publish(t, base, queue, m)
	}
	b.Do(t, "open the queue page", chromedp.Navigate(base+"/#/queues/"+queue),
		chromedp.WaitVisible(chromedp.CSS(`main[data-page="queue"] button#purge`)))

	// A peek shows the ready messages and settles none of them.
	b.Do(t, "peek", click(`button#peek`),
		chromedp.WaitVisible(chromedp.CSS(`#peek-box tr[data-offset="2"]`)))
	for off, body := range []string{"a", "b", "c"} {
		if got := b.Text(t, `#peek-box tr[data-offset="`+strconv.Itoa(off)+`"] td[data-field="body"]`); got != body {
			t.Errorf("peeked offset %d shows body %q, want %q", off, got, body)
		}
	}
	var ready struct {
		Ready    int64 `json:"ready"`
		Counters struct {
			Acked int64 `json:"acked"`
		} `json:"counters"`
	}
	apiCall(t, "GET", base+"/api/queues/"+queue, nil, http.StatusOK, &ready)
	if ready.Ready != 3 || ready.Counters.Acked != 0 {
		t.Fatalf("after a peek: %d ready, %d acked; want all 3 ready, none settled", ready.Ready, ready.Counters.Acked)
	}

	// A test message typed on the page survives the page's refreshes and
	// is published with its id.
	before := b.Text(t, `#status`)
	b.Do(t, "type a test message", chromedp.SendKeys(chromedp.CSS(`#test-body`), "hello from the page"),
		chromedp.SendKeys(chromedp.CSS(`#test-id`), "page-1"))
	b.WaitFor(t, "a refresh while typing", textOf(`#status`)+` !== `+strconv.Quote(before), textOf(`#status`))
	b.WaitFor(t, "the typed body kept across the refresh", `document.querySelector('#test-body').value === 'hello from the page'`,
		`document.querySelector('#test-body').value`)
	b.Do(t, "publish it", click(`#test-send`))
	b.WaitFor(t, "the test publish's confirm", textOf(`#action-result`)+`.startsWith('test message confirmed')`, textOf(`#action-result`))
	if got := b.Text(t, `#action-result`); !strings.Contains(got, "confirmed at partition 0, offset 3 (buffered)") {
		t.Errorf("the test publish says %q", got)
	}
	b.Do(t, "peek again", click(`button#peek`),
		chromedp.WaitVisible(chromedp.CSS(`#peek-box tr[data-offset="3"] td[data-field="id"]`)))
	if got := b.Text(t, `#peek-box tr[data-offset="3"] td[data-field="id"]`); got != "page-1" {
		t.Errorf("the test message's id shows %q", got)
	}

	// Cancel first: nothing happens.
	b.Do(t, "ask to purge, then cancel", click(`button#purge`),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-purge`)), click(`button#purge-no`),
		chromedp.WaitVisible(chromedp.CSS(`button#purge`)))
	var q struct {
		Messages   int64  `json:"messages"`
		Durability string `json:"durability"`
		Counters   struct {
			Purged int64 `json:"purged"`
		} `json:"counters"`
	}
	apiCall(t, "GET", base+"/api/queues/"+queue, nil, http.StatusOK, &q)
	if q.Messages != 4 {
		t.Fatalf("after a cancelled purge the queue holds %d messages", q.Messages)
	}

	b.Do(t, "purge, confirmed", click(`button#purge`),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-purge`)))
	if got := b.Text(t, `#confirm-purge p`); !strings.Contains(got, "Discard the 4 ready messages of orders") {
		t.Errorf("the purge asks %q", got)
	}
	b.Do(t, "confirm the purge", click(`button#purge-yes`),
		chromedp.WaitVisible(chromedp.CSS(`#action-result.ok`)))
	if got := b.Text(t, `#action-result`); got != "purged 4 messages" {
		t.Errorf("the purge says %q", got)
	}
	apiCall(t, "GET", base+"/api/queues/"+queue, nil, http.StatusOK, &q)
	if q.Messages != 0 || q.Counters.Purged != 4 {
		t.Fatalf("after the purge: %d messages, purged %d", q.Messages, q.Counters.Purged)
	}

	b.Do(t, "ask to switch to durable", click(`button#mode`),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-mode`)))
	if got := b.Text(t, `#confirm-mode p`); !strings.Contains(got, "Switch orders to durable?") {
		t.Errorf("the mode change asks %q", got)
	}
	b.Do(t, "confirm the switch", click(`button#mode-yes`),
		chromedp.WaitVisible(chromedp.CSS(`#action-result.ok`)))
	if got := b.Text(t, `#action-result`); got != "now durable" {
		t.Errorf("the mode change says %q", got)
	}
	b.WaitFor(t, "the card's mode badge to say durable", `document.querySelector('article[data-queue="orders"] .badge.durable') !== null`,
		`document.querySelector('article[data-queue="orders"] [data-field="durability"]')?.textContent`)
	apiCall(t, "GET", base+"/api/queues/"+queue, nil, http.StatusOK, &q)
	if q.Durability != "durable" {
		t.Fatalf("after the switch the queue is %s", q.Durability)
	}
	b.Screenshot(t, "dashboard-queue-actions.png")
}
