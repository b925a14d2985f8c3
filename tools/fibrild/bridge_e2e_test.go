package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/internal/fibrildproc"
)

// Issue 6, test 2, against a real fibrild: a JetStream stream of
// bridgeMessages (each with a Nats-Msg-Id) is carried into a queue with a
// dedupe window by a [[bridge.nats]] of fibril.toml, while fibrild (and so
// the bridge) is stopped with SIGTERM three times and SIGKILLed once
// mid-stream. Afterwards a fresh consumer finds every message in the queue
// exactly once.

const (
	bridgeMessages = 50000
	bridgeStream   = "READINGS"
	bridgeQueue    = "readings"
	bridgeWait     = 5 * time.Minute // bound on the whole test; a clean run takes well under a minute
)

const bridgeE2ETOML = `
[[bridge.nats]]
name = "site"
urls = ["%s"]

[[bridge.nats.ingest]]
mode = "jetstream"
stream = "READINGS"
durable = "fibril"
subject = "readings.>"
queue = "readings"
ack_wait = "5s"
fetch_batch = 256
`

func TestBridgeJetStreamRestartsAndKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs, stops and kills fibrild")
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), bridgeWait)
	defer cancel()

	ns := startJetStream(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: bridgeStream, Subjects: []string{"readings.>"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatalf("create stream: %v", err)
	}

	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfgPath := filepath.Join(dir, "fibril.toml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(bridgeE2ETOML, ns.ClientURL())), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := fibrildproc.Options{Bin: buildDaemon(t), DataDir: data, Config: cfgPath, Args: []string{"--storage.min_free", "0"}}
	startFibrild := func() *fibrildproc.Process {
		t.Helper()
		p, err := fibrildproc.Start(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Kill)
		return p
	}
	p := startFibrild()
	c, err := client.Dial(ctx, p.Addr, client.Options{Logger: quietLogger(), DisableReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeclareQueue(ctx, client.Queue(bridgeQueue).Buffered().DedupeWindow(time.Hour)); err != nil {
		t.Fatal(err)
	}
	c.Close()

	pubDone := make(chan error, 1)
	go func() { pubDone <- publishReadings(ctx, js, bridgeMessages) }()

	// The bridge's progress, across restarts: the consumer's ack floor.
	ackFloor := func() uint64 {
		cons, err := stream.Consumer(ctx, "fibril")
		if err != nil {
			return 0 // not created yet, or fibrild between lives
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return 0
		}
		return info.AckFloor.Stream
	}
	// Three graceful restarts and one kill, each after another fifth of
	// the stream is acked.
	var dups uint64 // duplicates confirmed, over the lives that ended cleanly
	for i, kill := range []bool{false, true, false, false} {
		target := uint64((i + 1) * bridgeMessages / 5)
		poll(t, ctx, fmt.Sprintf("ack floor %d before restart %d", target, i+1), func() bool { return ackFloor() >= target })
		if kill {
			if floor := ackFloor(); floor >= bridgeMessages {
				t.Fatalf("the bridge had acked the whole stream (%d) before the kill", floor)
			}
			p.Kill()
		} else {
			dups += bridgeDuplicates(t, ctx, p.Admin)
			if err := p.Stop(time.Minute); err != nil {
				t.Fatalf("stop %d: %v", i+1, err)
			}
		}
		p = startFibrild()
	}
	if err := <-pubDone; err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the bridge's consumer to settle", func() bool {
		cons, err := stream.Consumer(ctx, "fibril")
		if err != nil {
			return false
		}
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.AckFloor.Stream == bridgeMessages
	})
	checkReadings(t, ctx, p.Addr, bridgeMessages)
	dups += bridgeDuplicates(t, ctx, p.Admin)
	if err := p.Stop(time.Minute); err != nil {
		t.Fatalf("final stop: %v", err)
	}
	t.Logf("%d messages, 3 stops and 1 kill: %d redeliveries confirmed as duplicates (the killed life's not counted); %v in all, build included",
		bridgeMessages, dups, time.Since(start).Round(time.Millisecond))
}

// bridgeDuplicates reads the bridge's duplicates counter from the admin
// API's GET /api/bridges, once the bridge is listed: a fibrild just
// started lists it once it has started it, and the JetStream consumer's
// ack floor a caller waited for may be a previous life's.
func bridgeDuplicates(t *testing.T, ctx context.Context, admin string) uint64 {
	t.Helper()
	var dups uint64
	poll(t, ctx, "the bridge to be listed", func() bool {
		var r struct {
			Bridges []struct {
				Name       string `json:"name"`
				Duplicates uint64 `json:"duplicates"`
			} `json:"bridges"`
		}
		getJSON(t, admin+"/api/bridges", &r)
		switch {
		case len(r.Bridges) == 0:
			return false
		case len(r.Bridges) != 1 || r.Bridges[0].Name != "site":
			t.Fatalf("GET /api/bridges: %+v", r.Bridges)
		}
		dups = r.Bridges[0].Duplicates
		return true
	})
	return dups
}

// poll checks cond every 10 ms (each check is a round trip to the NATS
// server, too much for await's 1 ms tick) until it holds, and fails the
// test when ctx ends first.
func poll(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}

// startJetStream runs an embedded NATS server with JetStream, its store in
// a temp dir, on a random loopback port.
func startJetStream(t *testing.T) *natsserver.Server {
	t.Helper()
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return ns
}

// publishReadings publishes n messages to the stream, message i with body
// i and Nats-Msg-Id "r-i", over ten subjects, and waits for every ack.
func publishReadings(ctx context.Context, js jetstream.JetStream, n int) error {
	for i := 0; i < n; i++ {
		m := nats.NewMsg(fmt.Sprintf("readings.s%d", i%10))
		m.Data = []byte(strconv.Itoa(i))
		m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("r-%d", i))
		if _, err := js.PublishMsgAsync(m); err != nil {
			return fmt.Errorf("publish %d: %w", i, err)
		}
		if (i+1)%1000 == 0 || i == n-1 { // keep far below the async window
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				return fmt.Errorf("stream acks after %d: %w", i+1, ctx.Err())
			}
		}
	}
	return nil
}

// checkReadings consumes the queue with a fresh client and checks that it
// holds messages 0 to n-1, each exactly once, and nothing else.
func checkReadings(t *testing.T, ctx context.Context, addr string, n int) {
	t.Helper()
	c, err := client.Dial(ctx, addr, client.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A sentinel after everything else: the queue has one partition, so
	// it comes last.
	const sentinel = "sentinel"
	if _, err := c.Publish(ctx, bridgeQueue, client.Message{Body: []byte(sentinel)}); err != nil {
		t.Fatal(err)
	}
	cons, err := c.Consume(ctx, bridgeQueue, 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	seen := make([]int, n)
	total, twice := 0, 0
	for done := false; !done; {
		select {
		case d, ok := <-cons.Messages():
			if !ok {
				t.Fatalf("consumer ended after %d: %v", total, cons.Err())
			}
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
			if string(d.Body) == sentinel {
				done = true
				break
			}
			total++
			i, err := strconv.Atoi(string(d.Body))
			// The bridge namespaces a Nats-Msg-Id by its stream.
			if err != nil || i < 0 || i >= n || d.ID != fmt.Sprintf("%s/r-%d", bridgeStream, i) {
				t.Fatalf("unexpected message %q id %q", d.Body, d.ID)
			}
			if seen[i]++; seen[i] == 2 {
				twice++
			}
		case <-ctx.Done():
			t.Fatalf("consuming: %d so far: %v", total, ctx.Err())
		}
	}
	missing := 0
	for i, k := range seen {
		if k == 0 {
			if missing < 10 {
				t.Errorf("message %d missing", i)
			}
			missing++
		}
	}
	if missing > 0 || twice > 0 || total != n {
		t.Fatalf("%d messages in the queue, want %d: %d missing, %d more than once", total, n, missing, twice)
	}
}
