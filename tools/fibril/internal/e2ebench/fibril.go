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
	// Prefetch is the consumer's window; default 1000.
	Prefetch int
	// Nodes is the number of nodes when Addr lists a cluster's (0 or 1:
	// one broker). Policy is the replication policy each queue is
	// declared with, through Admin (say majority_durable or
	// replica_buffered:2); the streams then connect to the node that
	// serves the queue.
	Nodes  int
	Policy string
}

// System implements Target: "fibril", or "fibril-3n" for three nodes.
func (f Fibril) System() string {
	if f.Nodes > 1 {
		return fmt.Sprintf("fibril-%dn", f.Nodes)
	}
	return "fibril"
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
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dial := func(inflight int) (*client.Client, error) {
		return client.Dial(ctx, f.Addr, client.Options{ClientName: "fibril-bench", MaxInFlight: inflight,
			DisableReconnect: true, Logger: quiet})
	}
	s := &fibrilStream{target: f, queue: name}
	if f.Policy != "" {
		local, _, _ := strings.Cut(f.Addr, ",") // Admin is the first node's
		owner, err := declarePolicy(ctx, f.Admin, local, name, f.Mode(), f.Policy)
		if err != nil {
			return nil, err
		}
		f.Addr = owner + "," + f.Addr // the owner first; the rest if it is lost
	}
	sub, err := dial(0)
	if err != nil {
		return nil, fmt.Errorf("fibril: dial %s: %w", f.Addr, err)
	}
	s.sub = sub
	q := client.Queue(name).Buffered()
	if f.Durable {
		q = client.Queue(name).Durable()
	}
	if _, err := sub.DeclareQueue(ctx, q); err != nil {
		s.Close()
		return nil, fmt.Errorf("fibril: %w", err)
	}
	for range publishers {
		c, err := dial(window)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("fibril: dial %s: %w", f.Addr, err)
		}
		s.pubs = append(s.pubs, c)
	}
	return s, nil
}

type fibrilStream struct {
	target Fibril
	queue  string
	sub    *client.Client
	pubs   []*client.Client
	cons   *client.Consumer
}

type fibrilPending struct{ f *client.Future }

func (p fibrilPending) Wait(ctx context.Context) error { _, err := p.f.Wait(ctx); return err }

func (s *fibrilStream) Publish(p int, body []byte) (Pending, error) {
	return fibrilPending{s.pubs[p].PublishAsync(s.queue, client.Message{Body: body})}, nil
}

func (s *fibrilStream) Consume(ctx context.Context, deliver func([]byte)) error {
	prefetch := s.target.Prefetch
	if prefetch == 0 {
		prefetch = 1000
	}
	cons, err := s.sub.Subscribe(ctx, s.queue, client.SubscribeOptions{Prefetch: prefetch,
		Handler: func(_ context.Context, d *client.Delivery) error { deliver(d.Body); return nil }})
	if err != nil {
		return fmt.Errorf("fibril: subscribe %s: %w", s.queue, err)
	}
	s.cons = cons
	return nil
}

func (s *fibrilStream) Close() error {
	var errs []error
	for _, c := range s.pubs {
		errs = append(errs, c.Close())
	}
	if s.sub != nil {
		errs = append(errs, s.sub.Close())
	}
	if s.target.Admin != "" {
		errs = append(errs, deleteQueue(s.target.Admin, s.queue))
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
