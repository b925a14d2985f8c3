package bridge

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fibril-edge/fibril/appliance/client"
)

// cut closes every connection through the proxy; it keeps accepting new ones.
func (p *pausableProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func queueInfo(t *testing.T, fc *client.Client, q string) client.QueueInfo {
	t.Helper()
	info, err := fc.QueueInfo(testCtx(t), q)
	if err != nil {
		t.Fatalf("queue info %s: %v", q, err)
	}
	return info
}

// Deliveries the egress holds when its Fibril connection drops are the
// broker's again (it redelivers them): the egress does not send them as
// well, so a core subject sees each message once, in order, and not twice
// out of order.
func TestEgressSendsNoStaleDeliveryAfterAFibrilReconnect(t *testing.T) {
	const n = 8
	dir := t.TempDir()
	ns := startNATSAt(t, -1, dir)
	port := ns.Addr().(*net.TCPAddr).Port
	addr := startBroker(t)
	fc := fibril(t, addr)
	declare(t, fc, client.Queue("stale").Buffered().AckDeadline(time.Minute))
	proxy := startProxy(t, addr)
	br := runBridge(t, Options{URLs: []string{ns.ClientURL()}, FibrilAddr: proxy.addr(),
		ReconnectWait: 1500 * time.Millisecond, MaxReconnectWait: 2 * time.Second,
		Egress: []Egress{{Queue: "stale", Subject: "stale.out", Prefetch: n, ExtendEvery: 20 * time.Second}}})

	ns.Shutdown()
	ns.WaitForShutdown()
	waitFor(t, "the bridge to see NATS gone", func() bool { return br.Stats().State == StateReconnecting })
	for i := 0; i < n; i++ {
		if _, err := fc.Publish(testCtx(t), "stale", client.Message{ID: fmt.Sprintf("s-%d", i), Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "all held by the bridge", func() bool { return queueInfo(t, fc, "stale").InFlight == n })
	proxy.cut() // the Fibril connection drops: everything held is stale now

	ns = startNATSAt(t, port, dir)
	nc, _ := connectNATS(t, ns)
	got := make(chan *nats.Msg, 10*n)
	if _, err := nc.ChanSubscribe("stale.out", got); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the queue empty", func() bool { return queueInfo(t, fc, "stale").Messages() == 0 })
	br.stop()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var order []string
	count := map[string]int{}
	for len(got) > 0 {
		m := <-got
		order = append(order, string(m.Data))
		count[string(m.Data)]++
	}
	dups := len(order) - len(count)
	t.Logf("received on NATS, in order: %v", order)
	// The delivery being sent when the connection dropped may go out twice
	// (at least once); the ones merely waiting in the bridge must not.
	if dups > 1 {
		t.Fatalf("%d of %d messages published twice after one Fibril reconnect (order %v)", dups, n, order)
	}
}

// After a Fibril reconnect the broker delivers again what the egress held:
// the egress takes every delivery at once, however many, and keeps all
// their leases, so while JetStream does not answer (each attempt waits
// out its timeout) none is dead-lettered.
func TestEgressHoldsEveryDeliveryWhileJetStreamHangs(t *testing.T) {
	const (
		n           = 4
		ackDeadline = 2 * time.Second
	)
	ns := startNATS(t)
	nc, js := connectNATS(t, ns)
	// Something answers on the subject but never acks, as a stream without
	// a leader: each JetStream publish waits out its 5 s.
	hole, err := nc.Subscribe("hang.out", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	addr := startBroker(t)
	fc := fibril(t, addr)
	declare(t, fc, client.Queue("hang-dlq").Buffered())
	declare(t, fc, client.Queue("hang").Buffered().MaxDeliveries(3).AckDeadline(ackDeadline).DeadLetter("hang-dlq"))
	proxy := startProxy(t, addr)
	br := runBridge(t, Options{URLs: []string{ns.ClientURL()}, FibrilAddr: proxy.addr(),
		Egress: []Egress{{Queue: "hang", Subject: "hang.out", JetStream: true, Prefetch: n, ExtendEvery: ackDeadline / 5}}})
	for i := 0; i < n; i++ {
		if _, err := fc.Publish(testCtx(t), "hang", client.Message{ID: fmt.Sprintf("h-%d", i), Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "all held by the bridge", func() bool { return queueInfo(t, fc, "hang").InFlight == n })
	proxy.cut()
	cut := time.Now()
	waitFor(t, "something dead-lettered, or 12 s of JetStream hanging", func() bool {
		return queueInfo(t, fc, "hang-dlq").Messages() > 0 || time.Since(cut) > 12*time.Second
	})
	dlqDuringHang := queueInfo(t, fc, "hang-dlq").Messages()
	// JetStream answers again.
	_ = hole.Unsubscribe()
	if _, err := js.CreateStream(testCtx(t), jetstream.StreamConfig{Name: "HANG", Subjects: []string{"hang.>"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the queue empty", func() bool { return queueInfo(t, fc, "hang").Messages() == 0 })
	br.stop()
	if dlq := queueInfo(t, fc, "hang-dlq").Messages(); dlq != 0 || dlqDuringHang != 0 {
		t.Fatalf("%d of %d messages dead-lettered (%d while JetStream hung) though only NATS was at fault; stream holds %d; stats %+v",
			dlq, n, dlqDuringHang, streamMsgs(t, ns.ClientURL(), "HANG"), br.Stats())
	}
}

// An account whose JetStream storage is full answers a publish with
// status 400 (JSAccountResourcesExceededErr, 10002): the state of NATS,
// not the message's fault. The egress holds its messages until there is
// room, and dead-letters none.
func TestEgressHoldsWhileTheNATSAccountIsFull(t *testing.T) {
	const n = 5
	ns := startNATSWith(t, &natsserver.Options{Port: -1, StoreDir: t.TempDir()})
	if err := ns.GlobalAccount().UpdateJetStreamLimits(map[string]natsserver.JetStreamAccountLimits{
		"": {MaxMemory: -1, MaxStore: 8 << 10, MaxStreams: -1, MaxConsumers: -1},
	}); err != nil {
		t.Fatal(err)
	}
	_, js := connectNATS(t, ns)
	ctx := testCtx(t)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FULL", Subjects: []string{"full.>"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	var fillErr error
	for _, size := range []int{1024, 128, 16, 1} {
		for fillErr = nil; fillErr == nil; {
			_, fillErr = js.Publish(ctx, "full.fill", make([]byte, size))
		}
	}
	var apiErr *jetstream.APIError
	if !errors.As(fillErr, &apiErr) {
		t.Fatalf("the account never filled: %v", fillErr)
	}
	t.Logf("a publish to the full account: code %d, err_code %d: %v (refused: %v)", apiErr.Code, apiErr.ErrorCode, apiErr, refused(fillErr))

	addr := startBroker(t)
	fc := fibril(t, addr)
	declare(t, fc, client.Queue("full-dlq").Buffered())
	declare(t, fc, client.Queue("full").Buffered().MaxDeliveries(2).DeadLetter("full-dlq"))
	br := runBridge(t, Options{URLs: []string{ns.ClientURL()}, FibrilAddr: addr,
		Egress: []Egress{{Queue: "full", Subject: "full.out", JetStream: true}}})
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := fc.Publish(ctx, "full", client.Message{Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "everything dead-lettered, or 3 s of holding", func() bool {
		return queueInfo(t, fc, "full-dlq").Messages() == n || time.Since(start) > 3*time.Second
	})
	t.Logf("before the purge: dlq %d, stats %+v", queueInfo(t, fc, "full-dlq").Messages(), br.Stats())
	// The account has room again: everything held should go out now.
	if err := st.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the queue empty", func() bool { return queueInfo(t, fc, "full").Messages() == 0 })
	br.stop()
	if dlq := queueInfo(t, fc, "full-dlq").Messages(); dlq != 0 {
		t.Fatalf("%d of %d messages dead-lettered because the NATS account was full (released %d)", dlq, n, br.Stats().EgressFailed)
	}
}

// Errors nats-server sends with status 400 that describe the destination,
// not the message, are not refusals of the message.
func TestRefusedOnlyForTheMessagesOwnFault(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
	}{
		{"account resources exceeded (10002)", &jetstream.APIError{Code: 400, ErrorCode: 10002}},
		{"stream sealed (10109)", &jetstream.APIError{Code: 400, ErrorCode: 10109}},
		{"no JetStream limits (10120)", &jetstream.APIError{Code: 400, ErrorCode: 10120}},
		{"no stream for the subject", errNoStream},
	} {
		if refused(c.err) {
			t.Errorf("%s: taken for the message's own fault; every message of the queue would be dead-lettered", c.name)
		}
	}
}
