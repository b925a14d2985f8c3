package e2ebench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
)

// Fibril is a Target on a running fibrild, one mode per queue declaration.
type Fibril struct {
	// Addr is the client protocol address.
	Addr string
	// Admin is the admin API base URL, used to delete each queue after its
	// run; empty: queues are left in place.
	Admin string
	// Durable declares durable queues; otherwise buffered.
	Durable bool
	// Prefetch is the consumer's window; default 1000, and 64 a queue
	// when Queues spreads the stream.
	Prefetch int
	// Nodes is the number of nodes when Addr lists a cluster's (0 or 1:
	// one broker). Policy is the replication policy each queue is
	// declared with, through Admin (say majority_durable or
	// replica_buffered:2); the streams then connect to the node that
	// serves the queue.
	Nodes  int
	Policy string
	// Queues spreads each stream over this many queues (the many-queue
	// screen): name-0 to name-(Queues-1), each publisher's k-th publish
	// to queue k mod Queues over a connection to the node serving it,
	// one consumer a queue. 0 or 1: one queue, called name.
	Queues int
}

// spreadPrefetch is each consumer's window when a stream spreads over
// many queues: a thousand windows of a thousand would let the client
// buffer a gigabyte.
const spreadPrefetch = 64

// System implements Target: "fibril", "fibril-3n" for three nodes, with
// "-1000q" for a stream spread over 1,000 queues.
func (f Fibril) System() string {
	name := "fibril"
	if f.Nodes > 1 {
		name = fmt.Sprintf("fibril-%dn", f.Nodes)
	}
	if f.Queues > 1 {
		name += fmt.Sprintf("-%dq", f.Queues)
	}
	return name
}

// Mode implements Target.
func (f Fibril) Mode() string {
	if f.Durable {
		return "durable"
	}
	return "buffered"
}

// Open implements Target.
func (f Fibril) Open(ctx context.Context, name string, publishers, window int) (Stream, error) {
	s := &fibrilStream{target: f, queues: []string{name}, next: make([]atomic.Uint64, publishers)}
	if f.Queues > 1 {
		s.queues = make([]string, f.Queues)
		for i := range s.queues {
			s.queues[i] = fmt.Sprintf("%s-%d", name, i)
		}
	}
	if err := s.open(ctx, publishers, window); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// fibrilStream is one stream over one queue or several. Its connections
// come in groups, one a node serving some of its queues: the consumers'
// connection subs[g] and each publisher's pubs[p][g].
type fibrilStream struct {
	target Fibril
	queues []string
	group  []int // the connection group of each queue
	subs   []*client.Client
	pubs   [][]*client.Client
	next   []atomic.Uint64 // each publisher's publishes so far
	// declared counts the queues declared, from the first: Close
	// deletes them.
	declared int
	mu       sync.Mutex // one delivery at a time to Consume's callback
}

// open declares the queues and dials the connections.
func (s *fibrilStream) open(ctx context.Context, publishers, window int) error {
	f := s.target
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dial := func(addr string, inflight int) (*client.Client, error) {
		c, err := client.Dial(ctx, addr, client.Options{ClientName: "fibril-bench", MaxInFlight: inflight,
			DisableReconnect: true, Logger: quiet})
		if err != nil {
			return nil, fmt.Errorf("fibril: dial %s: %w", addr, err)
		}
		return c, nil
	}
	groupOf := map[string]int{}
	s.group = make([]int, len(s.queues))
	s.pubs = make([][]*client.Client, publishers)
	for i, q := range s.queues {
		addr := f.Addr
		if f.Policy != "" {
			local, _, _ := strings.Cut(f.Addr, ",") // Admin is the first node's
			owner, err := declarePolicy(ctx, f.Admin, local, q, f.Mode(), f.Policy)
			if err != nil {
				return err
			}
			s.declared++
			addr = owner + "," + f.Addr // the owner first; the rest if it is lost
		}
		g, ok := groupOf[addr]
		if !ok {
			g = len(s.subs)
			groupOf[addr] = g
			sub, err := dial(addr, 0)
			if err != nil {
				return err
			}
			s.subs = append(s.subs, sub)
			for p := range publishers {
				c, err := dial(addr, window)
				if err != nil {
					return err
				}
				s.pubs[p] = append(s.pubs[p], c)
			}
		}
		s.group[i] = g
		if f.Policy == "" {
			d := client.Queue(q).Buffered()
			if f.Durable {
				d = client.Queue(q).Durable()
			}
			if _, err := s.subs[g].DeclareQueue(ctx, d); err != nil {
				return fmt.Errorf("fibril: %w", err)
			}
			s.declared++
		}
	}
	return nil
}

// fibrilPending is a publish to the stream's one queue, whose confirms
// come in publish order: the time Wait returns is when it arrived.
type fibrilPending struct{ f *client.Future }

func (p fibrilPending) Wait(ctx context.Context) (time.Time, error) {
	_, err := p.f.Wait(ctx)
	return time.Now(), err
}

// stampedPending is a publish to one of several queues, whose confirms
// come in any order: a goroutine of its own stamps it when it arrives,
// so that waiting in publish order does not charge it a slower queue's
// wait.
type stampedPending struct {
	done    chan struct{}
	arrived time.Time
	err     error
}

// answer is what stamp needs of a *client.Future.
type answer interface {
	Done() <-chan struct{}
	Result() (client.Confirm, error)
}

// stamp watches f and stamps it with now() when it is answered.
func stamp(f answer, now func() time.Time) *stampedPending {
	p := &stampedPending{done: make(chan struct{})}
	go func() {
		<-f.Done()
		p.arrived = now()
		_, p.err = f.Result()
		close(p.done)
	}()
	return p
}

func (p *stampedPending) unordered() {}

func (p *stampedPending) Wait(ctx context.Context) (time.Time, error) {
	select {
	case <-p.done:
		return p.arrived, p.err
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}

func (s *fibrilStream) Publish(p int, body []byte) (Pending, error) {
	q := int((s.next[p].Add(1) - 1) % uint64(len(s.queues)))
	f := s.pubs[p][s.group[q]].PublishAsync(s.queues[q], client.Message{Body: body})
	if len(s.queues) > 1 {
		return stamp(f, time.Now), nil
	}
	return fibrilPending{f}, nil
}

func (s *fibrilStream) Queues() int { return len(s.queues) }

func (s *fibrilStream) Consume(ctx context.Context, deliver func(body []byte, received, arrived time.Time)) error {
	prefetch := s.target.Prefetch
	switch {
	case prefetch == 0 && len(s.queues) > 1:
		prefetch = spreadPrefetch
	case prefetch == 0:
		prefetch = 1000
	}
	handler := func(_ context.Context, d *client.Delivery) error {
		arrived := time.Now() // before the lock the queues' handlers share
		s.mu.Lock()
		defer s.mu.Unlock()
		deliver(d.Body, d.PublishedAt, arrived)
		return nil
	}
	for i, q := range s.queues {
		if _, err := s.subs[s.group[i]].Subscribe(ctx, q, client.SubscribeOptions{Prefetch: prefetch, Handler: handler}); err != nil {
			return fmt.Errorf("fibril: subscribe %s: %w", q, err)
		}
	}
	return nil
}

func (s *fibrilStream) Close() error {
	var errs []error
	for _, cs := range s.pubs {
		for _, c := range cs {
			errs = append(errs, c.Close())
		}
	}
	for _, c := range s.subs {
		errs = append(errs, c.Close())
	}
	if s.target.Admin != "" {
		for _, q := range s.queues[:s.declared] {
			errs = append(errs, deleteQueue(s.target.Admin, q))
		}
	}
	return errors.Join(errs...)
}

// deleteQueue removes a queue through the admin API.
func deleteQueue(admin, queue string) error {
	req, err := http.NewRequest(http.MethodDelete, admin+"/api/queues/"+url.PathEscape(queue), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("fibril: delete queue %s: %w", queue, err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("fibril: delete queue %s: %s", queue, resp.Status)
	}
	return nil
}

// declarePolicy declares a queue with a replication policy through a
// cluster node's admin API (whose client address is local), retrying
// while the cluster has no leader yet, and returns the client address of
// the node that serves it.
func declarePolicy(ctx context.Context, admin, local, queue, durability, policy string) (string, error) {
	body, err := json.Marshal(map[string]string{"name": queue, "durability": durability, "policy": policy})
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		addr, err := postDeclare(ctx, admin, local, body)
		if err == nil {
			return addr, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("fibril: declare %s with policy %s: %w", queue, policy, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func postDeclare(ctx context.Context, admin, local string, body []byte) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, admin+"/api/queues", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct {
		Queue struct {
			ServedBy *string `json:"served_by"` // absent: the node asked serves it
			ServedAt string  `json:"served_at"`
		} `json:"queue"`
		Error string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", fmt.Errorf("%s: %w", resp.Status, err)
	}
	switch {
	case resp.StatusCode/100 != 2:
		return "", fmt.Errorf("%s: %s", resp.Status, out.Error)
	case out.Queue.ServedBy == nil:
		return local, nil
	case out.Queue.ServedAt == "":
		return "", errors.New("no node serves the queue yet")
	}
	return out.Queue.ServedAt, nil
}
