package appliance

import (
	"runtime"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fibril-edge/fibril/wal"
)

// A partition opened with records left for replayHeld (a cluster node's
// queue whose Attach gave no gate: held replay, gate nil) must apply them
// before any publish. A publish that reaches handOver before the applier
// goroutine has locked applying is applied on its own goroutine first:
// apply refuses the offset and every later apply fails as well.
func TestHeldReplayBeforeDirectApply(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // the applier goroutine runs only when we yield
	ctx := testCtx(t)
	fs := vfs.NewMem()
	b := openBroker(t, fs, "data", Options{CheckpointDelay: time.Hour})
	defer b.Close()
	declare(t, ctx, b, QueueConfig{Name: "q", Durability: Buffered})
	q, err := b.queue("q")
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.MkdirAll("held", 0o755); err != nil {
		t.Fatal(err)
	}
	log, err := wal.Open("held", wal.Options{FS: fs, SegmentSize: 1 << 20, LockInProcess: true, BackgroundSyncInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	rec := func(i int) (byte, []byte) {
		r := publishRecord{At: time.Now(), Body: body(i)}
		return r.recordType(), encodePublish(r)
	}
	for i := range 3 { // written before the open, past the snapshot: held
		typ, payload := rec(i)
		if _, err := log.Append(ctx, []wal.Entry{{Type: typ, Payload: payload}}, wal.AfterFlush); err != nil {
			t.Fatal(err)
		}
	}
	rp := &replayer{q: q, held: true, st: newPartitionState(0)}
	p := openPartition(q, 0, log, rp, nil) // what Attach returning nil gives
	defer p.close()
	errs := make(chan error, 2)
	for i := 3; i < 5; i++ { // nothing yields between the open and these
		typ, payload := rec(i)
		p.publish(typ, payload, reservation{}, nil, func(_ wal.AppendResult, _ wal.Boundary, err error) { errs <- err })
	}
	for range 2 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("publish after the held records: %v", err)
			}
		case <-ctx.Done():
			t.Fatal("no confirm")
		}
	}
	waitFor(t, ctx, "all five applied", func() bool { return p.count.Load() == 5 })
}
