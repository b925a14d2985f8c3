package dashboard

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/admin"
)

// TestQueueTableAtAThousandQueues drives the queues page in headless
// Chromium over a node with 1,000 queues: the table shows one page of 50,
// counts them all, filters by name, sorts by a column both ways, pages
// forward and back, and links each row to its queue's page.
func TestQueueTableAtAThousandQueues(t *testing.T) {
	base, _, _, b := startNodeBroker(t, admin.Options{}, nil, appliance.Options{SegmentSize: 1 << 20})
	const n = 1000
	for i := range n {
		d := appliance.Durable
		if i%10 == 0 {
			d = appliance.Buffered
		}
		if _, err := b.Declare(t.Context(), appliance.QueueConfig{Name: fmt.Sprintf("q-%04d", i), Durability: d}); err != nil {
			t.Fatal(err)
		}
	}
	for name, k := range map[string]int{"q-0517": 7, "q-0542": 3, "q-0999": 5} {
		for j := range k {
			if _, err := b.Publish(t.Context(), name, appliance.Message{Body: fmt.Appendf(nil, "m%d", j)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	br := startBrowser(t, 1280, 900)
	page := `main[data-page="queues"] `
	rows := `document.querySelectorAll('main[data-page="queues"] tbody tr').length`
	firstRow := `(document.querySelector('main[data-page="queues"] tbody tr') || {dataset: {}}).dataset.queue`

	br.Do(t, "open the queues page", chromedp.Navigate(base+"/#/queues"),
		chromedp.WaitVisible(chromedp.CSS(page+`tbody tr[data-queue="q-0000"]`)))
	br.WaitFor(t, "every queue counted", textOf(page+`[data-field="queue-count"]`)+`.startsWith('1,000 queues, 100 buffered')`,
		textOf(page+`[data-field="queue-count"]`))
	br.WaitFor(t, "one page of 50 rows", rows+` === 50`, rows)
	if got := br.Text(t, page+`[data-field="page"]`); got != "page 1 of 20" {
		t.Errorf("pager says %q, want page 1 of 20", got)
	}

	br.Do(t, "filter by name", chromedp.SendKeys(chromedp.CSS(`#queue-filter`), "q-05"))
	br.WaitFor(t, "100 matches on two pages", textOf(page+`[data-field="page"]`)+` === 'page 1 of 2'`, textOf(page+`[data-field="page"]`))
	if got := br.Text(t, page+`[data-field="queue-count"]`); !strings.Contains(got, "100 match") {
		t.Errorf("count says %q, want 100 matching", got)
	}
	br.Do(t, "sort by backlog", click(page+`button[data-sort="backlog"]`))
	br.Do(t, "sort by backlog, largest first", click(page+`button[data-sort="backlog"]`))
	br.WaitFor(t, "the fullest matching queue first", firstRow+` === 'q-0517'`, firstRow)
	if got := br.Text(t, page+`tbody tr:nth-child(2) td[data-field="backlog"]`); got != "3" {
		t.Errorf("second row's backlog says %q, want 3 (q-0542)", got)
	}
	if got := br.Text(t, page+`th[aria-sort="descending"]`); !strings.Contains(got, "backlog") {
		t.Errorf("the descending header says %q", got)
	}
	br.Do(t, "the next page", click(page+`button[data-field="next-page"]`))
	br.WaitFor(t, "page 2 of 2", textOf(page+`[data-field="page"]`)+` === 'page 2 of 2'`, textOf(page+`[data-field="page"]`))
	br.WaitFor(t, "the second page's 50 rows", rows+` === 50`, rows)
	br.Screenshot(t, "dashboard-queues-table.png")

	if _, err := chromedp.Run(br.Ctx, chromedp.Evaluate[bool](`(() => { const f = document.querySelector('#queue-filter'); `+
		`f.value = ''; f.dispatchEvent(new Event('input')); return true; })()`)); err != nil {
		t.Fatalf("clear the filter: %v", err)
	}
	br.WaitFor(t, "every queue again, from page 1", textOf(page+`[data-field="page"]`)+` === 'page 1 of 20'`, textOf(page+`[data-field="page"]`))
	br.WaitFor(t, "q-0517 still first by backlog", firstRow+` === 'q-0517'`, firstRow)
	br.Do(t, "open a queue from its row", click(page+`tr[data-queue="q-0517"] a.name`),
		chromedp.WaitVisible(chromedp.CSS(`main[data-page="queue"] tr[data-partition="0"]`)))
	br.CheckNoExceptions(t)
}
