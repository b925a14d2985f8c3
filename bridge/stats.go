package bridge

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// State of a bridge's NATS connection, as Stats reports it.
const (
	StateStarting     = "starting"
	StateConnected    = "connected"
	StateReconnecting = "reconnecting"
	StateStopped      = "stopped"
)

// Stats is a snapshot of a bridge's state and counters, for the admin API
// and /metrics. Counters run from the bridge's start.
type Stats struct {
	Name  string `json:"name"`
	State string `json:"state"` // StateStarting, StateConnected, StateReconnecting, StateStopped
	// URLs are the NATS servers the bridge dials, credentials left out;
	// Routes say what it is configured to move, one line each (describe).
	URLs   []string `json:"urls"`
	Routes []string `json:"routes"`
	// LastError is the last NATS or Fibril error the bridge logged, "" for none.
	LastError string `json:"last_error"`
	// Reconnects counts NATS reconnects.
	Reconnects uint64 `json:"reconnects"`
	// MissingQueues lists, sorted, the queues the broker said do not
	// exist: a JetStream ingest blocked on one (it retries until the queue
	// is declared), a core ingest dropping messages for one, an egress
	// retrying its subscription; with Options.QueueExists, also a fixed
	// ingest queue missing when Run starts. A queue leaves the list once a
	// publish to it or a subscription on it succeeds, or QueueExists says
	// it exists. Never nil.
	MissingQueues []string `json:"missing_queues"`

	// Received counts messages taken from NATS by ingests (JetStream
	// redeliveries included).
	Received uint64 `json:"received"`
	// Published counts messages Fibril confirmed (stored at the queue's
	// durability), Duplicates those it confirmed as repeats within the
	// dedupe window.
	Published  uint64 `json:"published"`
	Duplicates uint64 `json:"duplicates"`
	// Dropped counts core messages given up, by reason (the broker's error
	// code, "no_queue" for a subject the mapping cannot name a queue for).
	Dropped map[string]uint64 `json:"dropped"`
	// Retries counts publishes retried because the queue refused them
	// (full) or the Fibril connection was lost; Blocked is true while a
	// JetStream ingest waits for its queue to take a message.
	Retries uint64 `json:"retries"`
	Blocked bool   `json:"blocked"`
	// JetStreamAcked counts JetStream acks sent after the Fibril confirm.
	JetStreamAcked uint64 `json:"jetstream_acked"`

	// Egressed counts Fibril messages NATS accepted and that were then
	// acked; EgressFailed those released for redelivery because NATS
	// refused them (while NATS is unreachable deliveries are held, not
	// released).
	Egressed     uint64 `json:"egressed"`
	EgressFailed uint64 `json:"egress_failed"`
}

// counters is the bridge's live Stats, guarded by mu.
type counters struct {
	mu      sync.Mutex
	s       Stats
	blocked int             // ingests currently blocked
	missing map[string]bool // queues the broker said do not exist
}

func (c *counters) update(f func(s *Stats)) {
	c.mu.Lock()
	f(&c.s)
	c.mu.Unlock()
}

// setState sets State, unless the bridge has stopped: nats.go reports the
// disconnect of the final Close after Run marked the bridge stopped.
func (c *counters) setState(state string) {
	c.mu.Lock()
	if c.s.State != StateStopped {
		c.s.State = state
	}
	c.mu.Unlock()
}

func (c *counters) drop(reason string) {
	c.update(func(s *Stats) { s.Dropped[reason]++ })
}

// setMissing records whether queue exists and reports whether that
// changed, so that a missing queue is logged once, not per retry.
func (c *counters) setMissing(queue string, missing bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.missing[queue] == missing {
		return false
	}
	if missing {
		if c.missing == nil {
			c.missing = map[string]bool{}
		}
		c.missing[queue] = true
	} else {
		delete(c.missing, queue)
	}
	return true
}

// missingQueues lists the queues marked missing, in no order.
func (c *counters) missingQueues() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.missing))
	for q := range c.missing {
		out = append(out, q)
	}
	return out
}

func (c *counters) setBlocked(on bool) {
	c.mu.Lock()
	if on {
		c.blocked++
	} else {
		c.blocked--
	}
	c.s.Blocked = c.blocked > 0
	c.mu.Unlock()
}

func (c *counters) snapshot() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.s
	s.URLs, s.Routes = slices.Clone(c.s.URLs), slices.Clone(c.s.Routes)
	s.Dropped = make(map[string]uint64, len(c.s.Dropped))
	for k, v := range c.s.Dropped {
		s.Dropped[k] = v
	}
	s.MissingQueues = make([]string, 0, len(c.missing))
	for q := range c.missing {
		s.MissingQueues = append(s.MissingQueues, q)
	}
	slices.Sort(s.MissingQueues)
	return s
}

// RedactURLs is urls without the credentials a URL may carry
// (user:password@), for logs and printed configurations.
func RedactURLs(urls []string) []string {
	r, _ := describe(Options{URLs: urls})
	return r
}

// describe says what a bridge is configured to do: the NATS URLs without
// their credentials, and one line per ingest and egress, for Stats.
func describe(o Options) (urls, routes []string) {
	for _, raw := range o.URLs {
		for _, one := range strings.Split(raw, ",") {
			one = strings.TrimSpace(one)
			if u, err := url.Parse(one); err == nil && u.Host != "" {
				u.User = nil
				one = u.String()
			} else if at := strings.LastIndex(one, "@"); at >= 0 {
				one = one[at+1:] // user:pass@host without a scheme
			}
			urls = append(urls, one)
		}
	}
	for _, in := range o.Ingest {
		how := "core"
		if in.Mode == JetStream {
			how = fmt.Sprintf("JetStream stream %s, consumer %s", in.Stream, in.Durable)
		} else if in.QueueGroup != "" {
			how = "core, queue group " + in.QueueGroup
		}
		subject := in.Subject
		if subject == "" {
			subject = "(the whole stream)"
		}
		routes = append(routes, fmt.Sprintf("ingest NATS %s → queue %s (%s)", subject, in.Queue, how))
	}
	for _, eg := range o.Egress {
		how := "core"
		if eg.JetStream {
			how = "JetStream"
		}
		routes = append(routes, fmt.Sprintf("egress queue %s → NATS %s (%s)", eg.Queue, eg.Subject, how))
	}
	return urls, routes
}
