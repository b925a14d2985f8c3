package appliance

import (
	"errors"
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
func (heldGate) Floor() uint64  { return 0 }
func (heldGate) Detach()        {}
func (heldGate) Status() string { return "held" }

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
