package appliance

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fibril-edge/fibril/wal"
)

// heldReplication gives every partition a gate that never opens: a
// cluster whose followers are all gone.
type heldReplication struct{}

func (heldReplication) Attach(string, int, QueueConfig, *wal.Log) ReplicaGate { return heldGate{} }

type heldGate struct{}

func (heldGate) Wait(stop <-chan struct{}, _ uint64) error {
	<-stop
	return errors.New("stopped")
}
func (heldGate) Floor() uint64                 { return 0 }
func (heldGate) Writable() error               { return nil }
func (heldGate) AwaitWritable(<-chan struct{}) {}
func (heldGate) Detach()                       {}
func (heldGate) Status() string                { return "held" }

// A partition whose applier waits at a gate that never opens, with the
// hand-off to it full and one more append blocked on it, still closes:
// Close returns, and every waiting append fails instead of hanging.
func TestCloseWithGateHeldAndHandOffFull(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{Replication: heldReplication{}})
	declare(t, ctx, b, QueueConfig{Name: "q", Durability: Durable})
	q, err := b.queue("q")
	if err != nil {
		t.Fatal(err)
	}
	p := q.parts[0]
	n := cap(p.applyCh) + 2 // one held at the gate, a full channel, one blocked
	var failed atomic.Int64
	submitted := make(chan struct{})
	go func() {
		defer close(submitted)
		for i := range n {
			p.submit(settleEntries(recAck, []uint64{uint64(i)}), func(_ wal.AppendResult, err error) {
				if err != nil {
					failed.Add(1)
				}
			})
		}
	}()
	waitFor(t, ctx, "the hand-off to the applier to fill", func() bool { return len(p.applyCh) == cap(p.applyCh) })
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return with the applier held at the gate and the hand-off full")
	}
	<-submitted
	if got := failed.Load(); got != int64(n) {
		t.Fatalf("%d of %d held appends failed; every one must", got, n)
	}
}

// switchedReplication gives every partition one gate that stays shut
// until the test opens it, and says when an applier first waits at it.
type switchedReplication struct {
	open    chan struct{}
	waiting chan uint64 // the next offset of each wait, while shut
}

func (r switchedReplication) Attach(string, int, QueueConfig, *wal.Log) ReplicaGate { return r }

func (r switchedReplication) Wait(stop <-chan struct{}, next uint64) error {
	if next == 0 {
		return nil // installed: the partition may write
	}
	select {
	case <-r.open:
		return nil
	default:
	}
	select {
	case r.waiting <- next:
	default:
	}
	select {
	case <-r.open:
		return nil
	case <-stop:
		return errors.New("stopped")
	}
}
func (switchedReplication) Floor() uint64                 { return 0 }
func (switchedReplication) Writable() error               { return nil }
func (switchedReplication) AwaitWritable(<-chan struct{}) {}
func (switchedReplication) Detach()                       {}
func (switchedReplication) Status() string                { return "switched" }

// writeHeld leaves queue q in fs's "data" with one publish (body)
// written but never past its gate, so never confirmed: a broker whose
// gate never opened, closed.
func writeHeld(t *testing.T, ctx context.Context, fs vfs.FS, d Durability, body string) {
	t.Helper()
	b := openBroker(t, fs, "data", Options{Replication: heldReplication{}})
	declare(t, ctx, b, QueueConfig{Name: "q", Durability: d})
	failed := make(chan error, 1)
	b.PublishAsync("q", Message{Body: []byte(body)}, func(_ Confirm, err error) { failed <- err })
	q, err := b.queue("q")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the publish to be written", func() bool { return q.parts[0].log.WrittenNext() == 1 })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-failed; err == nil {
		t.Fatal("a publish held at a shut gate confirmed")
	}
}

// A publish held at a gate that never opened was written to the log but
// never confirmed. After a restart it stays held: replay does not apply,
// count or deliver it until the gate passes it, and then it is delivered.
func TestReplayWaitsForTheGate(t *testing.T) {
	ctx := testCtx(t)
	fs := vfs.NewMem()
	writeHeld(t, ctx, fs, Buffered, "never confirmed")

	gate := switchedReplication{open: make(chan struct{}), waiting: make(chan uint64, 1)}
	b := openBroker(t, fs, "data", Options{Replication: gate})
	defer b.Close()
	delivered := make(chan Delivery, 1)
	sub, err := b.Subscribe("q", SubscribeOptions{Deliver: func(d Delivery) { delivered <- d }})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	select {
	case next := <-gate.waiting:
		// The held record (offset 0) and the marker the owner wrote
		// after it (1): the replay applies the old record only once a
		// record of its own is on enough copies.
		if next != 2 {
			t.Fatalf("the replay waits at the gate for %d, want 2", next)
		}
	case d := <-delivered:
		t.Fatalf("offset %d delivered after the restart before the gate passed it", d.Offset)
	case <-ctx.Done():
		t.Fatal("the replay never waited at the gate")
	}
	if in, err := b.QueueInfo("q"); err != nil || in.Messages != 0 {
		t.Fatalf("held at the gate, the queue counts %d messages (%v)", in.Messages, err)
	}
	select {
	case d := <-delivered:
		t.Fatalf("offset %d delivered while the gate is shut", d.Offset)
	default:
	}
	close(gate.open)
	select {
	case d := <-delivered:
		if string(d.Body) != "never confirmed" || d.Offset != 0 {
			t.Fatalf("delivered %q at %d", d.Body, d.Offset)
		}
	case <-ctx.Done():
		t.Fatal("the held record was not delivered once the gate passed it")
	}
}

// installReplication gives every partition a gate that refuses writes
// until the test installs it: a cluster's restarted owner before its
// recovery installed it. arrived says when a publish waits for it.
type installReplication struct {
	installed chan struct{}
	arrived   chan struct{}
}

func (r installReplication) Attach(string, int, QueueConfig, *wal.Log) ReplicaGate { return r }
func (installReplication) Wait(<-chan struct{}, uint64) error                      { return nil }
func (installReplication) Floor() uint64                                           { return 0 }
func (installReplication) Detach()                                                 {}
func (installReplication) Status() string                                          { return "installing" }

func (r installReplication) Writable() error {
	select {
	case <-r.installed:
		return nil
	default:
		return fmt.Errorf("%w: waits for the cluster to install this node", ErrUnavailable)
	}
}

func (r installReplication) AwaitWritable(stop <-chan struct{}) {
	select {
	case r.arrived <- struct{}{}:
	default:
	}
	select {
	case <-r.installed:
	case <-stop:
	}
}

// A publish that arrives while the partition waits to be installed is
// held until it may be written, then confirmed: it is not refused for
// arriving early. A publish still held at Close fails.
func TestPublishWaitsForInstall(t *testing.T) {
	ctx := testCtx(t)
	r := installReplication{installed: make(chan struct{}), arrived: make(chan struct{}, 1)}
	b := openBroker(t, vfs.NewMem(), "data", Options{Replication: r})
	defer b.Close()
	declare(t, ctx, b, QueueConfig{Name: "q", Durability: Durable})
	done := make(chan error, 1)
	b.PublishAsync("q", Message{Body: []byte("early")}, func(_ Confirm, err error) { done <- err })
	select {
	case <-r.arrived:
	case err := <-done:
		t.Fatalf("a publish before the install completed at once: %v", err)
	case <-ctx.Done():
		t.Fatal("the publish never waited for the install")
	}
	close(r.installed)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a publish held for the install failed once installed: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the held publish never completed")
	}

	r2 := installReplication{installed: make(chan struct{}), arrived: make(chan struct{}, 1)}
	b2 := openBroker(t, vfs.NewMem(), "data2", Options{Replication: r2})
	declare(t, ctx, b2, QueueConfig{Name: "q", Durability: Durable})
	b2.PublishAsync("q", Message{Body: []byte("held")}, func(_ Confirm, err error) { done <- err })
	<-r2.arrived
	if err := b2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("a publish held for an install that never came confirmed at Close")
	}
}

// The marker a replicated partition writes for its recovered records is
// refused once the partition closed, never sent on the closed hand-off to
// the applier (a select with both ready picks either: the send panicked).
func TestMarkerAfterCloseIsRefused(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{Replication: heldReplication{}})
	declare(t, ctx, b, QueueConfig{Name: "q", Durability: Durable})
	q, err := b.queue("q")
	if err != nil {
		t.Fatal(err)
	}
	p := q.parts[0]
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for range 64 {
		if _, err := p.appendMarker(); !errors.Is(err, ErrClosed) {
			t.Fatalf("a marker after close: %v, want ErrClosed", err)
		}
	}
}

// lateReplication gives every partition a gate that is writable from the
// start and passes every record, while replayHeld's wait for the install
// (Wait at 0) lasts until the test releases it: publishes reach the
// partition before its replay asks for the marker.
type lateReplication struct {
	heldGate // all but Wait
	release  chan struct{}
}

func (r lateReplication) Attach(string, int, QueueConfig, *wal.Log) ReplicaGate { return r }

func (r lateReplication) Wait(stop <-chan struct{}, next uint64) error {
	if next > 0 {
		return nil
	}
	select {
	case <-r.release:
		return nil
	case <-stop:
		return errors.New("stopped")
	}
}

// A partition reopened with records held for its gate, whose appends fill
// the hand-off to the applier before the replay writes the marker those
// records wait for, still completes them all: the marker is the first
// append, made by the first submit, so the replay never waits for a
// submit that waits for the replay (a restarted owner's queue hung with
// 129 records written and none confirmed).
func TestHeldRecordsWithHandOffFull(t *testing.T) {
	ctx := testCtx(t)
	fs := vfs.NewMem()
	writeHeld(t, ctx, fs, Durable, "held")

	r := lateReplication{release: make(chan struct{})}
	b := openBroker(t, fs, "data", Options{Replication: r})
	defer b.Close()
	q, err := b.queue("q")
	if err != nil {
		t.Fatal(err)
	}
	p := q.parts[0]
	n := cap(p.applyCh) + 2 // a full hand-off and one append blocked on it
	done := make(chan error, n)
	go func() { // one append each, unlike publishes, which batch
		for i := range n {
			p.submit(settleEntries(recAck, []uint64{uint64(1000 + i)}), func(_ wal.AppendResult, err error) { done <- err })
		}
	}()
	waitFor(t, ctx, "the hand-off to the applier to fill", func() bool { return len(p.applyCh) == cap(p.applyCh) })
	close(r.release)
	for range n {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("an append after the reopen failed: %v", err)
			}
		case <-ctx.Done():
			t.Fatal("appends that filled the hand-off before the marker never completed")
		}
	}
	if in, err := b.QueueInfo("q"); err != nil || in.Messages != 1 {
		t.Fatalf("the held record is not counted once the gate passed it: %d messages (%v)", in.Messages, err)
	}
}
