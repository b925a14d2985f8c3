package bridge

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/internal/brokertest"
)

// streamMsgs is how many messages stream name holds.
func streamMsgs(t *testing.T, url, name string) uint64 {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// Issue test 4: egress from a queue to a JetStream stream with the NATS
// server stopped and restarted mid-run. The stream ends with every message
// once (Nats-Msg-Id from the Fibril id), the queue ends empty, and while
// NATS is down nothing more is acked in Fibril than the stream holds.
func TestEgressJetStreamServerRestart(t *testing.T) {
	const n = 2000
	dir := t.TempDir()
	ns := startNATSAt(t, -1, dir)
	url := ns.ClientURL()
	port := ns.Addr().(*net.TCPAddr).Port
	_, js := connectNATS(t, ns)
	if _, err := js.CreateStream(testCtx(t), jetstream.StreamConfig{Name: "OUT", Subjects: []string{"out.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	addr := startBroker(t)
	fc := fibril(t, addr)
	declare(t, fc, client.Queue("outbox").Durable())
	for i := 0; i < n; i++ {
		if f := fc.PublishAsync("outbox", client.Message{ID: fmt.Sprintf("o-%d", i), Body: []byte(fmt.Sprint(i))}); i == n-1 {
			if _, err := f.Result(); err != nil {
				t.Fatal(err)
			}
		}
	}

	br := runBridge(t, Options{
		URLs: []string{url}, FibrilAddr: addr,
		ReconnectWait: 20 * time.Millisecond, MaxReconnectWait: 200 * time.Millisecond,
		Egress: []Egress{{Queue: "outbox", Subject: "out.box", JetStream: true, Prefetch: 32}},
	})
	waitFor(t, "a tenth egressed", func() bool { return br.Stats().Egressed >= n/10 })
	ns.Shutdown()
	ns.WaitForShutdown()
	// The egress holds its deliveries meanwhile (nothing is released:
	// EgressFailed stays 0).
	waitFor(t, "the bridge to see NATS gone", func() bool { return br.Stats().State == StateReconnecting })
	down := br.Stats()
	ns = startNATSAt(t, port, dir)
	// Every message the bridge acked in Fibril before NATS went down is
	// in the stream that came back.
	if held := streamMsgs(t, url, "OUT"); held < down.Egressed {
		t.Fatalf("stream holds %d after restart, but %d were acked in Fibril", held, down.Egressed)
	}
	waitFor(t, "all egressed", func() bool { return br.Stats().Egressed >= n })
	br.stop()
	if got := streamMsgs(t, url, "OUT"); got != n {
		t.Fatalf("stream holds %d messages, want %d", got, n)
	}
	if left := drain(t, fc, "outbox"); len(left) != 0 {
		t.Fatalf("%d messages left in the queue", len(left))
	}
	s := br.Stats()
	t.Logf("egressed %d, released %d, reconnects %d", s.Egressed, s.EgressFailed, s.Reconnects)
	if s.Reconnects == 0 {
		t.Errorf("no reconnect counted")
	}
	if s.EgressFailed != 0 {
		t.Errorf("%d messages released for redelivery: an unreachable NATS is not their fault", s.EgressFailed)
	}
}

// An egress whose queue is deleted keeps the queue in MissingQueues and
// subscribes again, and once the queue is declared again its messages go
// out as before.
func TestEgressResumesAfterItsQueueIsDeclaredAgain(t *testing.T) {
	ns := startNATS(t)
	addr := startBroker(t)
	fc := fibril(t, addr)
	declare(t, fc, client.Queue("outq").Buffered())
	nc, _ := connectNATS(t, ns)
	got := make(chan *nats.Msg, 10)
	sub, err := nc.ChanSubscribe("out.x", got)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	br := runBridge(t, Options{URLs: []string{ns.ClientURL()}, FibrilAddr: addr,
		Egress: []Egress{{Queue: "outq", Subject: "out.x"}}})
	if err := fc.DeleteQueue(testCtx(t), "outq"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted queue reported missing", func() bool {
		s := br.Stats()
		return len(s.MissingQueues) == 1 && s.MissingQueues[0] == "outq"
	})
	declare(t, fc, client.Queue("outq").Buffered())
	if _, err := fc.Publish(testCtx(t), "outq", client.Message{Body: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if string(m.Data) != "after" {
			t.Fatalf("egressed %q", m.Data)
		}
	case <-time.After(testTimeout):
		t.Fatalf("egress never resumed after the queue was declared again; stats %+v", br.Stats())
	}
	if s := br.Stats(); s.State == StateStopped {
		t.Fatalf("stats %+v", s)
	}
}

// An egress holds its deliveries while NATS is down, however long: NATS
// refusing to answer is not the messages' fault, so it must not use up
// their MaxDeliveries. NATS stays down for longer than MaxDeliveries
// publish attempts of the message being sent and than MaxDeliveries ack
// deadlines of those waiting behind it, then comes back on the same port:
// every message reaches the stream, none is dead-lettered.
func TestEgressHoldsDeliveriesWhileNATSIsDown(t *testing.T) {
	const (
		n             = 100 // above the prefetch: some wait in the broker, the rest with the bridge
		maxDeliveries = 3
		ackDeadline   = 500 * time.Millisecond
	)
	dir := t.TempDir()
	ns := startNATSAt(t, -1, dir)
	url := ns.ClientURL()
	port := ns.Addr().(*net.TCPAddr).Port
	_, js := connectNATS(t, ns)
	if _, err := js.CreateStream(testCtx(t), jetstream.StreamConfig{Name: "HELD", Subjects: []string{"held.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	addr := startBroker(t)
	fc := fibril(t, addr)
	declare(t, fc, client.Queue("held-dlq").Buffered())
	declare(t, fc, client.Queue("held").Buffered().MaxDeliveries(maxDeliveries).AckDeadline(ackDeadline).DeadLetter("held-dlq"))
	var logs brokertest.LogBuffer
	br := runBridge(t, Options{
		URLs: []string{url}, FibrilAddr: addr,
		ReconnectWait: 20 * time.Millisecond, MaxReconnectWait: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Egress: []Egress{{Queue: "held", Subject: "held.out", JetStream: true, ExtendEvery: ackDeadline / 5}},
	})
	if _, err := fc.Publish(testCtx(t), "held", client.Message{ID: "before", Body: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a message egressed while NATS is up", func() bool { return br.Stats().Egressed == 1 })

	ns.Shutdown()
	ns.WaitForShutdown()
	waitFor(t, "the bridge to see NATS gone", func() bool { return br.Stats().State == StateReconnecting })
	down := time.Now()
	for i := 0; i < n; i++ {
		if f := fc.PublishAsync("held", client.Message{ID: fmt.Sprintf("h-%d", i), Body: []byte(fmt.Sprint(i))}); i == n-1 {
			if _, err := f.Result(); err != nil {
				t.Fatal(err)
			}
		}
	}
	queued := func(q string) uint64 {
		info, err := fc.QueueInfo(testCtx(t), q)
		if err != nil {
			t.Fatalf("queue info %s: %v", q, err)
		}
		return info.Messages()
	}
	held := func() int { return strings.Count(logs.String(), "egress delivery held") }
	// Down until the message being sent has been tried more than twice
	// MaxDeliveries times and the others have waited out MaxDeliveries
	// ack deadlines and more, or until something is dead-lettered.
	waitFor(t, "a long enough outage", func() bool {
		return (held() > 2*maxDeliveries && time.Since(down) > (maxDeliveries+1)*ackDeadline) || queued("held-dlq") > 0
	})
	ns = startNATSAt(t, port, dir)
	waitFor(t, "every message in the stream, or the queue empty", func() bool {
		return streamMsgs(t, url, "HELD") == n+1 || queued("held") == 0
	})
	if dlq := queued("held-dlq"); dlq != 0 {
		t.Fatalf("%d messages dead-lettered though only NATS was down (stats %+v)", dlq, br.Stats())
	}
	if got := streamMsgs(t, url, "HELD"); got != n+1 {
		t.Fatalf("stream holds %d messages, want %d (stats %+v)", got, n+1, br.Stats())
	}
	// The queue empties as the broker applies the acks, which may come
	// before the bridge counts them: wait for both.
	waitFor(t, "the queue empty and its messages counted", func() bool { return queued("held") == 0 && br.Stats().Egressed >= n+1 })
	br.stop()
	s := br.Stats()
	t.Logf("held %d times during the outage; egressed %d, failed %d, reconnects %d", held(), s.Egressed, s.EgressFailed, s.Reconnects)
	if s.Egressed != n+1 || s.EgressFailed != 0 {
		t.Errorf("egressed %d, failed %d: want %d egressed and nothing released", s.Egressed, s.EgressFailed, n+1)
	}
}

// A message NATS refuses is the message's own fault, not an outage: it is
// released for redelivery and so runs through its MaxDeliveries to the
// dead-letter queue, while the messages behind it go out. Here one is
// larger than the server's max payload (core egress), and one states an
// expectation the stream does not meet (JetStream egress,
// Nats-Expected-Last-Sequence). A subject no stream takes yet is not the
// message's fault: its message is held until a stream takes it.
func TestEgressReleasesMessagesNATSRefuses(t *testing.T) {
	const maxDeliveries = 2
	ns := startNATSWith(t, &natsserver.Options{Port: -1, StoreDir: t.TempDir(), MaxPayload: 1024})
	nc, js := connectNATS(t, ns)
	got := make(chan *nats.Msg, 10)
	sub, err := nc.ChanSubscribe("big.out", got)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EXPECT", Subjects: []string{"expect.>"}}); err != nil {
		t.Fatal(err)
	}
	addr := startBroker(t)
	fc := fibril(t, addr)
	for _, q := range []string{"big", "expect", "nostream"} {
		declare(t, fc, client.Queue(q+"-dlq").Buffered())
		declare(t, fc, client.Queue(q).Buffered().MaxDeliveries(maxDeliveries).DeadLetter(q+"-dlq"))
	}
	br := runBridge(t, Options{URLs: []string{ns.ClientURL()}, FibrilAddr: addr, Egress: []Egress{
		{Queue: "big", Subject: "big.out"},
		{Queue: "expect", Subject: "expect.out", JetStream: true},
		{Queue: "nostream", Subject: "nostream.out", JetStream: true},
	}})
	for _, p := range []struct {
		queue string
		m     client.Message
	}{
		{"big", client.Message{Body: []byte(strings.Repeat("x", 4096))}}, {"big", client.Message{Body: []byte("small")}},
		{"expect", client.Message{Body: []byte("never"), Headers: []client.Header{{Key: "Nats-Expected-Last-Sequence", Value: "999"}}}},
		{"expect", client.Message{Body: []byte("kept")}},
		{"nostream", client.Message{Body: []byte("held")}},
	} {
		if _, err := fc.Publish(ctx, p.queue, p.m); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case m := <-got:
		if string(m.Data) != "small" {
			t.Fatalf("egressed %d bytes, want the small message", len(m.Data))
		}
	case <-ctx.Done():
		t.Fatalf("the message behind the refused one never went out; stats %+v", br.Stats())
	}
	queued := func(q string) uint64 {
		info, err := fc.QueueInfo(ctx, q)
		if err != nil {
			t.Fatalf("queue info %s: %v", q, err)
		}
		return info.Messages()
	}
	waitFor(t, "both refused messages dead-lettered", func() bool { return queued("big-dlq") == 1 && queued("expect-dlq") == 1 })
	waitFor(t, "the message behind the refused expectation in its stream", func() bool { return streamMsgs(t, ns.ClientURL(), "EXPECT") == 1 })
	// The subject no stream took: held, not released, until one does.
	if n := queued("nostream"); n != 1 || queued("nostream-dlq") != 0 {
		t.Fatalf("with no stream for its subject: %d queued, %d dead-lettered; want it held", n, queued("nostream-dlq"))
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "LATE", Subjects: []string{"nostream.>"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the held message in the stream made for it", func() bool { return streamMsgs(t, ns.ClientURL(), "LATE") == 1 })
	// The stream holds a message before the bridge has its publish ack
	// and acks it in Fibril: wait for the bridge's count.
	waitFor(t, "the bridge to ack the three messages NATS took", func() bool { return br.Stats().Egressed == 3 })
	br.stop()
	if s := br.Stats(); s.Egressed != 3 || s.EgressFailed != 2*maxDeliveries {
		t.Fatalf("egressed %d, released %d: want 3 and %d (each refused message once per delivery)", s.Egressed, s.EgressFailed, 2*maxDeliveries)
	}
	// The acks and the dead-lettering settle in the broker after their
	// answers: wait for the queues to show them.
	waitFor(t, "the source queues empty", func() bool { return queued("big")+queued("expect")+queued("nostream") == 0 })
	if n := queued("nostream-dlq"); n != 0 {
		t.Fatalf("%d held messages dead-lettered", n)
	}
}
