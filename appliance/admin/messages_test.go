package admin

import (
	"encoding/base64"
	"net/http"
	"testing"
)

// TestPublishThenGet publishes text and binary messages and fetches them
// with each settle mode.
func TestPublishThenGet(t *testing.T) {
	f := newFixture(t, Options{})
	f.declare(map[string]any{"name": "jobs", "durability": "durable"})

	var c confirmView
	f.do("POST", "/api/queues/jobs/messages", map[string]any{
		"id": "m-1", "key": "k", "headers": map[string]string{"trace": "abc"}, "body": "first",
	}).want(t, http.StatusOK, &c)
	if c.Queue != "jobs" || c.Offset != 0 || c.Duplicate || c.Durability != "durable" {
		t.Fatalf("confirm %+v", c)
	}
	binary := []byte{0xff, 0x00, 0xfe}
	f.do("POST", "/api/queues/jobs/messages", map[string]any{
		"body_base64": base64.StdEncoding.EncodeToString(binary),
	}).want(t, http.StatusOK, &c)
	if c.Offset != 1 {
		t.Fatalf("second confirm %+v", c)
	}

	// A peek ("none", the default) leaves both messages in the queue.
	var peek getReply
	f.do("POST", "/api/queues/jobs/get", map[string]any{"max": 2, "wait_ms": 5000}).want(t, http.StatusOK, &peek)
	if len(peek.Messages) != 2 || peek.Settled != "none" {
		t.Fatalf("peek: %+v", peek)
	}
	m0, m1 := peek.Messages[0], peek.Messages[1]
	if m0.ID != "m-1" || m0.Body == nil || *m0.Body != "first" || m0.Headers["trace"] != "abc" || m0.Deliveries != 1 {
		t.Fatalf("first message %+v", m0)
	}
	if m1.Body != nil || m1.BodyBase64 == nil || *m1.BodyBase64 != base64.StdEncoding.EncodeToString(binary) {
		t.Fatalf("binary message %+v", m1)
	}

	// Requeue one, then ack what is there.
	var rq getReply
	f.do("POST", "/api/queues/jobs/get", map[string]any{"max": 1, "ack": "requeue", "wait_ms": 5000}).want(t, http.StatusOK, &rq)
	if len(rq.Messages) != 1 {
		t.Fatalf("requeue got %d", len(rq.Messages))
	}
	var acked getReply
	f.do("POST", "/api/queues/jobs/get", map[string]any{"max": 2, "ack": "ack", "wait_ms": 5000}).want(t, http.StatusOK, &acked)
	if len(acked.Messages) != 2 || acked.Settled != "ack" {
		t.Fatalf("ack got %+v", acked)
	}
	waitFor(t, "acks applied", func() bool {
		in, err := f.b.QueueInfo("jobs")
		return err == nil && in.Messages == 0
	})
	var empty getReply
	f.do("POST", "/api/queues/jobs/get", map[string]any{"wait_ms": 0}).want(t, http.StatusOK, &empty)
	if len(empty.Messages) != 0 {
		t.Fatalf("empty queue returned %+v", empty)
	}

	// A nack without a dead-letter queue discards.
	f.do("POST", "/api/queues/jobs/messages", map[string]any{"body": "bad"}).want(t, http.StatusOK, nil)
	var nacked getReply
	f.do("POST", "/api/queues/jobs/get", map[string]any{"ack": "nack", "wait_ms": 5000}).want(t, http.StatusOK, &nacked)
	if len(nacked.Messages) != 1 {
		t.Fatalf("nack got %+v", nacked)
	}
	waitFor(t, "discard applied", func() bool {
		in, err := f.b.QueueInfo("jobs")
		return err == nil && in.Messages == 0 && in.Counters.Discarded == 1
	})
}

// TestPublishAndGetErrors covers the refusals of both endpoints.
func TestPublishAndGetErrors(t *testing.T) {
	f := newFixture(t, Options{})
	f.declare(map[string]any{"name": "small", "durability": "buffered", "max_messages": 1})
	f.do("POST", "/api/queues/small/messages", map[string]any{"body": "one"}).want(t, http.StatusOK, nil)
	for _, tc := range []struct {
		name, path string
		body       any
		status     int
		code       string
	}{
		{"full", "/api/queues/small/messages", map[string]any{"body": "two"}, http.StatusTooManyRequests, "queue_full"},
		{"unknown queue", "/api/queues/nope/messages", map[string]any{"body": "x"}, http.StatusNotFound, "not_found"},
		{"bad queue name", "/api/queues/-x/messages", map[string]any{"body": "x"}, http.StatusBadRequest, "invalid"},
		{"two bodies", "/api/queues/small/messages", map[string]any{"body": "x", "body_base64": "eA=="}, http.StatusBadRequest, "invalid"},
		{"bad base64", "/api/queues/small/messages", map[string]any{"body_base64": "!!"}, http.StatusBadRequest, "invalid"},
		{"unknown field", "/api/queues/small/messages", map[string]any{"payload": "x"}, http.StatusBadRequest, "invalid"},
		{"get unknown queue", "/api/queues/nope/get", map[string]any{}, http.StatusNotFound, "not_found"},
		{"get bad ack", "/api/queues/small/get", map[string]any{"ack": "maybe"}, http.StatusBadRequest, "invalid"},
		{"get bad max", "/api/queues/small/get", map[string]any{"max": 0}, http.StatusBadRequest, "invalid"},
		{"get bad wait", "/api/queues/small/get", map[string]any{"wait_ms": -1}, http.StatusBadRequest, "invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.do("POST", tc.path, tc.body).wantError(t, tc.status, tc.code)
		})
	}
}

// TestDuplicatePublish checks the confirm of a duplicate id.
func TestDuplicatePublish(t *testing.T) {
	f := newFixture(t, Options{})
	f.declare(map[string]any{"name": "d", "dedupe_window_ms": 60000})
	var first, second confirmView
	f.do("POST", "/api/queues/d/messages", map[string]any{"id": "x", "body": "a"}).want(t, http.StatusOK, &first)
	f.do("POST", "/api/queues/d/messages", map[string]any{"id": "x", "body": "a"}).want(t, http.StatusOK, &second)
	if first.Duplicate || !second.Duplicate || second.Offset != first.Offset {
		t.Fatalf("first %+v second %+v", first, second)
	}
}
