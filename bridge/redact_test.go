package bridge

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/internal/brokertest"
)

// A NATS URL's user:password@ stays out of the bridge's log, as out of its
// Stats.
func TestBridgeLogsURLsWithoutCredentials(t *testing.T) {
	var log brokertest.LogBuffer
	b, err := New(Options{Name: "b", URLs: []string{"nats://alice:s3cret@127.0.0.1:1"}, FibrilAddr: "127.0.0.1:1",
		Ingest: []Ingest{{Subject: "a", Queue: "q"}}, Logger: log.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); b.Run(ctx) }()
	await.Until(t, ctx, "the bridge to log that NATS is not reachable", func() bool {
		return strings.Contains(log.String(), "nats not reachable")
	})
	cancel()
	<-done
	if strings.Contains(strings.Join(b.Stats().URLs, " "), "s3cret") || strings.Contains(log.String(), "s3cret") {
		t.Fatalf("the NATS password is in the stats %v or the log:\n%s", b.Stats().URLs, log.String())
	}
	if !strings.Contains(log.String(), "127.0.0.1:1") {
		t.Fatalf("the log names no URL:\n%s", log.String())
	}
}
