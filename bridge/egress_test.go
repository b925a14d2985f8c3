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
