package bridge

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fibril-edge/fibril/appliance/client"
)

// fillStream creates stream name on subjects and publishes n messages to
// subject, every other one with a Nats-Msg-Id, waiting for every ack.
func fillStream(t *testing.T, js jetstream.JetStream, name, subject string, n int) {
	t.Helper()
	ctx := testCtx(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	futs := make([]jetstream.PubAckFuture, 0, n)
	for i := 0; i < n; i++ {
		m := nats.NewMsg(subject)
		m.Data = []byte(fmt.Sprint(i))
		if i%2 == 0 {
			m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("msg-%d", i))
		}
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			t.Fatal(err)
		}
		futs = append(futs, f)
		if (i+1)%500 == 0 { // keep the publisher far below its async window
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				t.Fatal("publish acks timed out")
			}
		}
	}
	for i, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatalf("publish %d: %v", i, err)
		case <-ctx.Done():
			t.Fatal("publish acks timed out")
		}
	}
}

// consumerSettled reports whether the durable has nothing pending or
// unacked.
func consumerSettled(t *testing.T, js jetstream.JetStream, stream, durable string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, stream, durable)
	if err != nil {
		t.Fatalf("consumer info: %v", err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("consumer info: %v", err)
	}
	return info.NumPending == 0 && info.NumAckPending == 0
}

// checkExactlyOnce checks that the deliveries are the stream's n messages,
// each once.
func checkExactlyOnce(t *testing.T, got []*client.Delivery, n int) {
	t.Helper()
	seen := make(map[string]bool, n)
	for _, d := range got {
		if seen[string(d.Body)] {
			t.Fatalf("message %s arrived twice (id %s)", d.Body, d.ID)
		}
		seen[string(d.Body)] = true
	}
	for i := 0; i < n; i++ {
		if !seen[fmt.Sprint(i)] {
			t.Fatalf("message %d missing (%d of %d arrived)", i, len(got), n)
		}
	}
	if len(got) != n {
		t.Fatalf("%d messages, want %d", len(got), n)
	}
}

// Issue test 2, in process: JetStream ingest of N messages while the
// bridge is stopped and started again twice mid-stream. Every message
// arrives, and with the dedupe window exactly once.
func TestJetStreamIngestRestarts(t *testing.T) {
	const n = 5000
	ns := startNATS(t)
	addr := startBroker(t)
	fc := fibril(t, addr)
	declare(t, fc, client.Queue("readings").Buffered().DedupeWindow(10*time.Minute))
	_, js := connectNATS(t, ns)
	if _, err := js.CreateStream(testCtx(t), jetstream.StreamConfig{Name: "READINGS", Subjects: []string{"readings.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	opts := Options{
		URLs:       []string{ns.ClientURL()},
		FibrilAddr: addr,
		Ingest:     []Ingest{{Mode: JetStream, Stream: "READINGS", Durable: "bridge", Subject: "readings.>", Queue: "readings", FetchBatch: 100}},
	}
	// Publish while the bridge runs, so that it is restarted mid-stream
	// with messages still arriving.
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			t.Error(err)
			return
		}
		defer nc.Close()
		pjs, _ := jetstream.New(nc)
		for i := 0; i < n; i++ {
			m := nats.NewMsg(fmt.Sprintf("readings.s%d", i%10))
			m.Data = []byte(fmt.Sprint(i))
			if i%2 == 0 {
				m.Header.Set(nats.MsgIdHdr, fmt.Sprintf("msg-%d", i))
			}
			if _, err := pjs.PublishMsgAsync(m); err != nil {
				t.Error(err)
				return
			}
			if (i+1)%500 == 0 { // keep the publisher far below its async window
				select {
				case <-pjs.PublishAsyncComplete():
				case <-time.After(testTimeout):
					t.Error("stream publishes not acked")
					return
				}
			}
		}
		select {
		case <-pjs.PublishAsyncComplete():
		case <-time.After(testTimeout):
			t.Error("stream publishes not acked")
		}
	}()

	var acked, dups uint64
	for run, until := range []uint64{n / 4, n / 2} {
		br := runBridge(t, opts)
		waitFor(t, fmt.Sprintf("run %d to ack %d", run+1, until), func() bool {
			return acked+br.Stats().JetStreamAcked >= until
		})
		br.stop()
		s := br.Stats()
		acked += s.JetStreamAcked
		dups += s.Duplicates
	}
	<-pubDone
	br := runBridge(t, opts)
	waitFor(t, "the consumer to settle", func() bool {
		return consumerSettled(t, js, "READINGS", "bridge")
	})
	br.stop()
	s := br.Stats()
	acked += s.JetStreamAcked
	dups += s.Duplicates
	t.Logf("acked %d, duplicates confirmed %d", acked, dups)
	if acked < n {
		t.Errorf("acked %d < %d", acked, n)
	}
	checkExactlyOnce(t, drain(t, fc, "readings"), n)
}

// Two JetStream ingests from different streams into one queue with a
// dedupe window, whose publishers use the same Nats-Msg-Ids ("1", "2", …):
// Nats-Msg-Id is unique per stream only, so the Fibril id is namespaced by
// the stream, and each stream's messages all arrive, none taken for the
// other's duplicate.
func TestJetStreamIngestMsgIDsPerStream(t *testing.T) {
	const n = 50
	ns := startNATS(t)
	addr := startBroker(t)
	fc := fibril(t, addr)
	declare(t, fc, client.Queue("merged").Buffered().DedupeWindow(10*time.Minute))
	_, js := connectNATS(t, ns)
	ctx := testCtx(t)
	for _, stream := range []string{"EAST", "WEST"} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{strings.ToLower(stream) + ".>"}, Storage: jetstream.FileStorage}); err != nil {
			t.Fatalf("create stream %s: %v", stream, err)
		}
		for i := 1; i <= n; i++ {
			m := nats.NewMsg(strings.ToLower(stream) + ".x")
			m.Data = []byte(fmt.Sprintf("%s-%d", stream, i))
			m.Header.Set(nats.MsgIdHdr, fmt.Sprint(i))
			if _, err := js.PublishMsg(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	br := runBridge(t, Options{URLs: []string{ns.ClientURL()}, FibrilAddr: addr, Ingest: []Ingest{
		{Mode: JetStream, Stream: "EAST", Durable: "bridge", Queue: "merged"},
		{Mode: JetStream, Stream: "WEST", Durable: "bridge", Queue: "merged"},
	}})
	waitFor(t, "both streams settled", func() bool {
		return consumerSettled(t, js, "EAST", "bridge") && consumerSettled(t, js, "WEST", "bridge")
	})
	br.stop()
	got := drain(t, fc, "merged")
	seen := map[string]string{}
	for _, d := range got {
		seen[string(d.Body)] = d.ID
	}
	for _, stream := range []string{"EAST", "WEST"} {
		for i := 1; i <= n; i++ {
			if body := fmt.Sprintf("%s-%d", stream, i); seen[body] == "" {
				t.Fatalf("%s missing: %d of %d messages arrived (stats %+v)", body, len(got), 2*n, br.Stats())
			}
		}
	}
	for body, id := range seen {
		stream, i, _ := strings.Cut(body, "-")
		if want := stream + "/" + i; id != want {
			t.Fatalf("%s has id %q, want %q", body, id, want)
		}
	}
	if s := br.Stats(); len(got) != 2*n || s.Duplicates != 0 {
		t.Fatalf("%d messages, %d confirmed as duplicates; want %d and none", len(got), s.Duplicates, 2*n)
	}
}
