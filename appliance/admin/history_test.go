package admin

import (
	"net/http"
	"testing"
	"time"
)

// The history keeps each queue's samples, newest last and at most
// HistorySamples of them; the node's history sums the queues; a deleted
// queue's history goes with it.
func TestHistory(t *testing.T) {
	f := newFixture(t, Options{HistorySamples: 2, HistoryInterval: time.Second})
	f.declare(map[string]any{"name": "clicks"})
	f.declare(map[string]any{"name": "orders"})
	t0 := time.Unix(1_800_000_000, 0)
	publish := func(q string, n int) {
		for range n {
			f.do("POST", "/api/queues/"+q+"/messages", map[string]any{"body": "x"}).want(t, http.StatusOK, nil)
		}
	}
	publish("clicks", 3)
	f.srv.Sample(t0)
	publish("clicks", 2)
	publish("orders", 1)
	f.srv.Sample(t0.Add(time.Second))
	f.srv.Sample(t0.Add(2 * time.Second))

	var h historyView
	f.do("GET", "/api/queues/clicks/history", nil).want(t, http.StatusOK, &h)
	if h.IntervalMs != 1000 || len(h.Samples) != 2 {
		t.Fatalf("clicks history: interval %d ms, %d samples; want 1000 and the newest 2", h.IntervalMs, len(h.Samples))
	}
	if s := h.Samples[0]; !s.T.Equal(t0.Add(time.Second)) || s.Published != 5 || s.Messages != 5 {
		t.Fatalf("clicks' oldest kept sample %+v", s)
	}
	f.do("GET", "/api/history", nil).want(t, http.StatusOK, &h)
	if len(h.Samples) != 2 || h.Samples[1].Published != 6 || h.Samples[1].Messages != 6 {
		t.Fatalf("node history %+v", h.Samples)
	}
	f.do("GET", "/api/queues/nope/history", nil).wantError(t, http.StatusNotFound, "not_found")
	f.do("DELETE", "/api/queues/clicks", nil).want(t, http.StatusOK, nil)
	f.srv.Sample(t0.Add(3 * time.Second))
	if got := f.srv.history.queueHistory("clicks"); len(got) != 0 {
		t.Fatalf("a deleted queue keeps %d samples", len(got))
	}
}
