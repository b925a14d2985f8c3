package admin

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/fibril-edge/fibril/appliance"
)

// getSettings is GET /api/settings: appliance.Settings with its dotted
// JSON keys.
func (s *Server) getSettings(r *http.Request) (int, any, error) {
	return 0, s.b.Settings(), nil
}

// putSettings is PUT /api/settings. Keys left out keep their value, so
// {"storage.background_sync_interval_ms": 50} changes one setting; unknown
// keys and values out of range are a 400 and change nothing.
func (s *Server) putSettings(r *http.Request) (int, any, error) {
	next := s.b.Settings()
	if err := decode(r, maxRequest, &next); err != nil {
		return 0, nil, err
	}
	if err := s.b.UpdateSettings(next); err != nil {
		return 0, nil, err
	}
	return 0, s.b.Settings(), nil
}

// healthz answers while the process serves HTTP.
func (s *Server) healthz(r *http.Request) (int, any, error) {
	return 0, map[string]string{"status": "ok"}, nil
}

// notReady is /readyz's 503 details: what keeps the broker from serving.
type notReady struct {
	Closed  bool              `json:"closed"`
	Failed  map[string]string `json:"failed"`  // queue: why it could not be opened
	Latched []string          `json:"latched"` // queue/partition: the log's failure
}

// notReadyCounts is /readyz's 503 details for a request without a token
// when tokens are set: how much is wrong, without naming queues or
// quoting errors.
type notReadyCounts struct {
	Closed            bool `json:"closed"`
	FailedQueues      int  `json:"failed_queues"`
	LatchedPartitions int  `json:"latched_partitions"`
}

// readyz is ready when the broker is open and every declared queue opened
// and has no latched log. It needs no token, so probes need none; when
// tokens are set, only a request with one learns which queues are wrong
// and why, the others get the counts.
func (s *Server) readyz(r *http.Request) (int, any, error) {
	nr := notReady{Closed: s.b.Closed(), Failed: map[string]string{}, Latched: []string{}}
	var reasons []string
	if nr.Closed {
		reasons = append(reasons, appliance.ErrClosed.Error())
	}
	for name, err := range s.b.QueueErrors() {
		nr.Failed[name] = err.Error()
		reasons = append(reasons, fmt.Sprintf("queue %s failed to open: %v", name, err))
	}
	for _, name := range s.b.QueueNames() {
		in, err := s.b.QueueInfo(name)
		if err != nil {
			continue
		}
		for _, p := range in.Partitions {
			if p.Latched {
				what := fmt.Sprintf("%s/%d", name, p.Index)
				nr.Latched = append(nr.Latched, what+": "+p.LastError)
				reasons = append(reasons, fmt.Sprintf("queue %s partition %d latched: %s", name, p.Index, p.LastError))
			}
		}
	}
	if len(reasons) == 0 {
		return 0, map[string]string{"status": "ready"}, nil
	}
	if !s.tokens.Empty() && !s.authorized(r) {
		counts := notReadyCounts{Closed: nr.Closed, FailedQueues: len(nr.Failed), LatchedPartitions: len(nr.Latched)}
		return 0, nil, &Error{Status: http.StatusServiceUnavailable, Code: "not_ready",
			Err: fmt.Errorf("not ready: closed %t, %d queue(s) failed to open, %d partition(s) latched "+
				"(send a token for the details)", counts.Closed, counts.FailedQueues, counts.LatchedPartitions),
			Details: counts}
	}
	sort.Strings(nr.Latched)
	sort.Strings(reasons)
	return 0, nil, &Error{Status: http.StatusServiceUnavailable, Code: "not_ready",
		Err: errors.New("not ready: " + strings.Join(reasons, "; ")), Details: nr}
}
