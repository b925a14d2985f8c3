package admin

import (
	"net/http"
	"sync"
	"time"
)

// History: the admin API keeps a bounded ring of each queue's figures,
// sampled by whoever runs the server (fibrild every HistoryInterval) with
// Sample, so the dashboard's charts and scripts (GET
// /api/queues/{name}/history, GET /api/history) see the last hour without
// a time-series database. Counters are kept as they are; a rate is the
// difference of two samples over their distance.

// DefaultHistoryInterval and DefaultHistorySamples make an hour at 5 s.
const (
	DefaultHistoryInterval = 5 * time.Second
	DefaultHistorySamples  = 720
)

// QueueSample is one queue's figures at one instant.
type QueueSample struct {
	T                time.Time `json:"t"`
	Published        int64     `json:"published"` // counters since fibrild started
	Delivered        int64     `json:"delivered"`
	Acked            int64     `json:"acked"`
	Messages         int64     `json:"messages"` // backlog: unsettled, at the queue's boundary
	UnsyncedRecords  uint64    `json:"unsynced_records"`
	OldestUnsyncedMs int64     `json:"oldest_unsynced_ms"`
}

// historyView is a history as the API answers it.
type historyView struct {
	IntervalMs int64         `json:"interval_ms"`
	Samples    []QueueSample `json:"samples"`
}

// history is the rings, one per queue; mu guards them.
type history struct {
	mu    sync.Mutex
	max   int
	rings map[string][]QueueSample // oldest first, at most max
}

func newHistory(max int) *history {
	return &history{max: max, rings: map[string][]QueueSample{}}
}

// Sample records every open queue's figures at now; queues that are gone
// lose their history. Call it every Options.HistoryInterval.
func (s *Server) Sample(now time.Time) {
	samples := map[string]QueueSample{}
	for _, name := range s.b.QueueNames() {
		in, err := s.b.QueueInfo(name)
		if err != nil {
			continue
		}
		q := QueueSample{T: now, Published: in.Counters.Published, Delivered: in.Counters.Delivered,
			Acked: in.Counters.Acked, Messages: in.Messages}
		for _, p := range in.Partitions {
			q.UnsyncedRecords += p.UnsyncedRecords
			q.OldestUnsyncedMs = max(q.OldestUnsyncedMs, p.OldestUnsynced.Milliseconds())
		}
		samples[name] = q
	}
	h := s.history
	h.mu.Lock()
	defer h.mu.Unlock()
	for name := range h.rings {
		if _, ok := samples[name]; !ok {
			delete(h.rings, name)
		}
	}
	for name, q := range samples {
		r := append(h.rings[name], q)
		if len(r) > h.max {
			r = append(r[:0], r[len(r)-h.max:]...)
		}
		h.rings[name] = r
	}
}

// queueHistory is a copy of one queue's ring.
func (h *history) queueHistory(name string) []QueueSample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]QueueSample{}, h.rings[name]...)
}

// nodeHistory sums the rings sample by sample (the node's figures): the
// queues are sampled together, so their i-th samples share an instant
// when their rings are aligned at the newest end.
func (h *history) nodeHistory() []QueueSample {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.rings {
		n = max(n, len(r))
	}
	out := make([]QueueSample, n)
	for _, r := range h.rings {
		off := n - len(r)
		for i, q := range r {
			o := &out[off+i]
			o.T = q.T
			o.Published += q.Published
			o.Delivered += q.Delivered
			o.Acked += q.Acked
			o.Messages += q.Messages
			o.UnsyncedRecords += q.UnsyncedRecords
			o.OldestUnsyncedMs = max(o.OldestUnsyncedMs, q.OldestUnsyncedMs)
		}
	}
	return out
}

// getQueueHistory answers GET /api/queues/{name}/history.
func (s *Server) getQueueHistory(r *http.Request) (int, any, error) {
	name, err := queueName(r)
	if err != nil {
		return 0, nil, err
	}
	if _, err := s.b.QueueInfo(name); err != nil {
		return 0, nil, err
	}
	return 0, historyView{IntervalMs: s.opts.HistoryInterval.Milliseconds(), Samples: s.history.queueHistory(name)}, nil
}

// getHistory answers GET /api/history: the node's sums.
func (s *Server) getHistory(*http.Request) (int, any, error) {
	return 0, historyView{IntervalMs: s.opts.HistoryInterval.Milliseconds(), Samples: s.history.nodeHistory()}, nil
}
