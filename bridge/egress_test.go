package bridge

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fibril-edge/fibril/appliance/client"
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
	waitFor(t, "egress to fail while NATS is down", func() bool { return br.Stats().EgressFailed > 0 })
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
	t.Logf("egressed %d, failed (released) %d, reconnects %d", s.Egressed, s.EgressFailed, s.Reconnects)
	if s.Reconnects == 0 {
		t.Errorf("no reconnect counted")
	}
}
