package bridge

import (
	"context"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
)

// Issue test 3: a full queue (reject overflow) stops the JetStream pull:
// nothing beyond what the queue took is acked, the stream keeps the rest;
// draining the queue resumes the bridge by itself, and nothing is lost or
// doubled.
func TestJetStreamBackpressure(t *testing.T) {
	const n, limit = 1000, 100
	ns := startNATS(t)
	addr := startBroker(t)
	fc := fibril(t, addr)
	declare(t, fc, client.Queue("alerts").Buffered().MaxMessages(limit).RejectWhenFull().DedupeWindow(10*time.Minute))
	_, js := connectNATS(t, ns)
	fillStream(t, js, "ALERTS", "alerts.x", n)

	br := runBridge(t, Options{
		URLs:       []string{ns.ClientURL()},
		FibrilAddr: addr,
		Ingest:     []Ingest{{Mode: JetStream, Stream: "ALERTS", Durable: "bridge", Queue: "alerts", FetchBatch: 50}},
	})
	waitFor(t, "the ingest to block", func() bool { s := br.Stats(); return s.Blocked && s.Retries > 0 })
	if s := br.Stats(); s.JetStreamAcked > limit {
		t.Fatalf("acked %d to JetStream with a queue of %d: acked before Fibril stored them", s.JetStreamAcked, limit)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	c, err := js.Consumer(ctx, "ALERTS", "bridge")
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if held := info.NumPending + uint64(info.NumAckPending); held < n-limit {
		t.Fatalf("stream holds %d unacked, want at least %d", held, n-limit)
	}

	// Drain: consume everything; the bridge resumes by itself.
	cons, err := fc.Consume(testCtx(t), "alerts", 50)
	if err != nil {
		t.Fatal(err)
	}
	var got []*client.Delivery
	ctxAll := testCtx(t)
	for len(got) < n {
		select {
		case d := <-cons.Messages():
			_ = d.Ack()
			got = append(got, d)
		case <-ctxAll.Done():
			t.Fatalf("drained %d of %d; stats %+v", len(got), n, br.Stats())
		}
	}
	if err := cons.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the consumer to settle", func() bool { return consumerSettled(t, js, "ALERTS", "bridge") })
	br.stop()
	if s := br.Stats(); s.Blocked || s.JetStreamAcked < n || len(s.Dropped) != 0 {
		t.Errorf("stats after drain: %+v", s)
	}
	got = append(got, drain(t, fc, "alerts")...)
	checkExactlyOnce(t, got, n)
}
