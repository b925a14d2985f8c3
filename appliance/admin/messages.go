package admin

import (
	"encoding/base64"
	"net/http"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/fibril-edge/fibril/appliance"
)

// publishRequest is POST /api/queues/{name}/messages. The body is text
// ("body") or bytes in standard base64 ("body_base64"), not both.
type publishRequest struct {
	ID         string            `json:"id"`
	Key        string            `json:"key"`
	Headers    map[string]string `json:"headers"`
	Body       string            `json:"body"`
	BodyBase64 *string           `json:"body_base64"`
}

// confirmView is a publish's confirm: where it landed, at which boundary.
type confirmView struct {
	Queue      string `json:"queue"`
	Partition  int    `json:"partition"`
	Offset     uint64 `json:"offset"`
	Duplicate  bool   `json:"duplicate"`
	Durability string `json:"durability"` // durable: synced; buffered: written
}

func (s *Server) publish(r *http.Request) (int, any, error) {
	name, err := queueName(r)
	if err != nil {
		return 0, nil, err
	}
	var req publishRequest
	if err := decode(r, maxMessageRequest, &req); err != nil {
		return 0, nil, err
	}
	m := appliance.Message{ID: req.ID, Key: req.Key, Body: []byte(req.Body), Headers: headerList(req.Headers)}
	if req.BodyBase64 != nil {
		if req.Body != "" {
			return 0, nil, invalid("body and body_base64 are both set; send one")
		}
		if m.Body, err = base64.StdEncoding.DecodeString(*req.BodyBase64); err != nil {
			return 0, nil, invalid("body_base64: %v", err)
		}
	}
	c, err := s.b.Publish(r.Context(), name, m)
	if err != nil {
		return 0, nil, err
	}
	return 0, confirmView{Queue: c.Queue, Partition: c.Partition, Offset: c.Offset,
		Duplicate: c.Duplicate, Durability: c.Durability.String()}, nil
}

func headerList(h map[string]string) []appliance.Header {
	if len(h) == 0 {
		return nil
	}
	out := make([]appliance.Header, 0, len(h))
	for k, v := range h {
		out = append(out, appliance.Header{Key: k, Value: v})
	}
	slices.SortFunc(out, func(a, b appliance.Header) int {
		if a.Key < b.Key {
			return -1
		}
		if a.Key > b.Key {
			return 1
		}
		return 0
	})
	return out
}

// Fetch limits.
const (
	defaultGetWait = 250 * time.Millisecond
	maxGetWait     = 30 * time.Second
	maxGetMessages = 1000
)

// getRequest is POST /api/queues/{name}/get.
type getRequest struct {
	Max    int    `json:"max"`     // default 1, at most 1000
	Ack    string `json:"ack"`     // ack | nack | requeue | none (default)
	WaitMs *int   `json:"wait_ms"` // default 250, at most 30000
}

// getReply lists the messages fetched and how they were settled.
type getReply struct {
	Messages []messageView `json:"messages"`
	Settled  string        `json:"settled"`
}

type messageView struct {
	Queue       string            `json:"queue"`
	Partition   int               `json:"partition"`
	Offset      uint64            `json:"offset"`
	Deliveries  uint32            `json:"deliveries"`
	ID          string            `json:"id,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	Body        *string           `json:"body,omitempty"`        // when the body is UTF-8
	BodyBase64  *string           `json:"body_base64,omitempty"` // otherwise
	PublishedAt time.Time         `json:"published_at"`
}

// get subscribes for at most wait_ms, takes up to max deliveries, settles
// them as asked and unsubscribes. With "none" the messages are returned to
// the queue when the subscription closes (no delivery counted), so a get
// without "ack" is a peek.
func (s *Server) get(r *http.Request) (int, any, error) {
	name, err := queueName(r)
	if err != nil {
		return 0, nil, err
	}
	req := getRequest{Max: 1, Ack: "none"}
	if err := decode(r, maxRequest, &req); err != nil {
		return 0, nil, err
	}
	wait := defaultGetWait
	if req.WaitMs != nil {
		wait = time.Duration(*req.WaitMs) * time.Millisecond
	}
	switch {
	case req.Max < 1 || req.Max > maxGetMessages:
		return 0, nil, invalid("max %d (1-%d)", req.Max, maxGetMessages)
	case wait < 0 || wait > maxGetWait:
		return 0, nil, invalid("wait_ms %d (0-%d)", wait.Milliseconds(), maxGetWait.Milliseconds())
	case !slices.Contains([]string{"ack", "nack", "requeue", "none"}, req.Ack):
		return 0, nil, invalid("ack %q (ack, nack, requeue or none)", req.Ack)
	}
	// The prefetch bounds what arrives before the settle; a delivery that
	// finds the channel full (credit returned by the settle) stays leased
	// to the subscription, and its Close puts it back in the queue.
	got := make(chan appliance.Delivery, req.Max)
	sub, err := s.b.Subscribe(name, appliance.SubscribeOptions{Prefetch: req.Max,
		Deliver: func(d appliance.Delivery) {
			select {
			case got <- d:
			default:
			}
		}})
	if err != nil {
		return 0, nil, err
	}
	defer sub.Close()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var ds []appliance.Delivery
collect:
	for len(ds) < req.Max {
		select {
		case d := <-got:
			ds = append(ds, d)
		case <-timer.C:
			break collect
		case <-r.Context().Done():
			return 0, nil, r.Context().Err()
		}
	}
	if err := settle(sub, req.Ack, ds); err != nil {
		return 0, nil, err
	}
	out := getReply{Messages: make([]messageView, 0, len(ds)), Settled: req.Ack}
	for _, d := range ds {
		out.Messages = append(out.Messages, viewMessage(d))
	}
	return 0, out, nil
}

func settle(sub *appliance.Subscription, how string, ds []appliance.Delivery) error {
	if len(ds) == 0 || how == "none" {
		return nil
	}
	tags := make([]uint64, len(ds))
	for i, d := range ds {
		tags[i] = d.Tag
	}
	switch how {
	case "ack":
		return sub.Ack(tags...)
	case "nack":
		return sub.Nack(false, tags...)
	default:
		return sub.Nack(true, tags...)
	}
}

func viewMessage(d appliance.Delivery) messageView {
	v := messageView{Queue: d.Queue, Partition: d.Partition, Offset: d.Offset, Deliveries: d.Deliveries,
		ID: d.MessageID, PublishedAt: d.PublishedAt.UTC()}
	if len(d.Headers) > 0 {
		v.Headers = make(map[string]string, len(d.Headers))
		for _, h := range d.Headers {
			v.Headers[h.Key] = h.Value
		}
	}
	if utf8.Valid(d.Body) {
		b := string(d.Body)
		v.Body = &b
	} else {
		b := base64.StdEncoding.EncodeToString(d.Body)
		v.BodyBase64 = &b
	}
	return v
}
