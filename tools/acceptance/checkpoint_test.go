package acceptance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
)

// Case 3a: a power cut right after a checkpoint returns the checkpointed
// state exactly: per queue the same unsettled messages and bytes, per
// partition the same written and durable frontiers; no acked message
// comes back and nothing confirmed is lost, in either mode.
func TestPowerCutAfterCheckpoint(t *testing.T) {
	for _, fsType := range []string{"xfs", "ext4"} {
		t.Run(fsType, func(t *testing.T) {
			ctx := caseCtx(t, 2*time.Minute)
			e := newCaseEnv(t, ctx, fsType, "--storage.segment_size", "1MiB", "--storage.checkpoint_delay", "200ms")
			queues := bothModes("ckpt")
			for i := range 3 {
				before := e.settleAndCheckpoint(ctx, queues, i)
				e.schedule("cycle %d: power cut right after the checkpoint", i)
				e.powerCut(ctx)
				e.restart(ctx)
				for _, q := range queues {
					after, err := e.b.QueueInfo(ctx, q.Name)
					if err != nil {
						t.Fatal(err)
					}
					if d := stateDiff(before[q.Name], after); d != "" {
						t.Fatalf("cycle %d: %s after the cut differs from its checkpoint: %s", i, q.Name, d)
					}
				}
			}
			rep := e.verify(ctx, queues)
			if len(rep.Lost) != 0 || len(rep.AckedReturned) != 0 {
				t.Fatalf("checkpointed state not returned exactly: %d lost, %d acked messages returned", len(rep.Lost), len(rep.AckedReturned))
			}
		})
	}
}

// settleAndCheckpoint publishes a batch to each queue, acks part of it,
// waits until the broker has applied the acks and logged a checkpoint
// covering everything, and returns the queues' state then.
func (e *caseEnv) settleAndCheckpoint(ctx context.Context, queues []QueueSpec, cycle int) map[string]QueueInfo {
	t := e.t
	t.Helper()
	e.publishBatch(ctx, queues, fmt.Sprint("ck", cycle), 300)
	want := map[string]uint64{}
	state := map[string]QueueInfo{}
	for _, q := range queues {
		qi, err := e.b.QueueInfo(ctx, q.Name)
		if err != nil {
			t.Fatal(err)
		}
		acked := e.ackSome(ctx, q.Name, 100)
		err = awaitQueue(ctx, e.b, q.Name, func(after QueueInfo) bool {
			return after.Messages == qi.Messages-int64(acked) && after.InFlight == 0
		})
		if err != nil {
			t.Fatalf("%s: acks not applied: %v", q.Name, err)
		}
		qi, err = e.b.QueueInfo(ctx, q.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range qi.Partitions {
			want[fmt.Sprintf("%s/%d", q.Name, p.Index)] = p.WrittenNext
		}
	}
	if err := e.ckpt.wait(ctx, want); err != nil {
		t.Fatal(err)
	}
	for _, q := range queues {
		qi, err := e.b.QueueInfo(ctx, q.Name)
		if err != nil {
			t.Fatal(err)
		}
		state[q.Name] = qi
	}
	return state
}

// ackSome takes up to n deliveries from queue on a fresh consumer and acks
// them, recording both in the history; it returns how many it acked.
func (e *caseEnv) ackSome(ctx context.Context, queue string, n int) int {
	t := e.t
	t.Helper()
	c, err := client.Dial(ctx, e.b.Addr(), client.Options{Logger: quiet(), DisableReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cons, err := c.Consume(ctx, queue, n)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for i := range n {
		select {
		case d, ok := <-cons.Messages():
			if !ok {
				t.Fatalf("%s: consumer ended after %d of %d deliveries: %v", queue, i, n, cons.Err())
			}
			e.h.Record(Event{Kind: KindDeliver, Queue: queue, ID: d.ID, Part: d.Partition, Off: d.Offset, N: d.Deliveries})
			if err := d.Ack(); err != nil {
				t.Fatalf("ack: %v", err)
			}
			e.h.Record(Event{Kind: KindAck, Queue: queue, ID: d.ID, Part: d.Partition, Off: d.Offset})
			e.ackedIDs = append(e.ackedIDs, d.ID)
		case <-ctx.Done():
			t.Fatalf("%s: %d of %d deliveries: %v", queue, i, n, ctx.Err())
		}
	}
	return n
}

// awaitQueue polls queue's admin info until cond holds or ctx ends.
func awaitQueue(ctx context.Context, b *Broker, queue string, cond func(QueueInfo) bool) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var last QueueInfo
	for {
		qi, err := b.QueueInfo(ctx, queue)
		if err == nil {
			if cond(qi) {
				return nil
			}
			last = qi
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %d messages, %d in flight)", ctx.Err(), last.Messages, last.InFlight)
		}
	}
}

// stateDiff compares what a checkpoint holds: unsettled messages and
// bytes, and each partition's frontiers.
func stateDiff(a, b QueueInfo) string {
	if a.Messages != b.Messages || a.Bytes != b.Bytes || len(a.Partitions) != len(b.Partitions) {
		return fmt.Sprintf("messages %d/%d bytes %d/%d partitions %d/%d", a.Messages, b.Messages, a.Bytes, b.Bytes, len(a.Partitions), len(b.Partitions))
	}
	for i, p := range a.Partitions {
		q := b.Partitions[i]
		if p.WrittenNext != q.WrittenNext || p.DurableNext != q.DurableNext || p.Messages != q.Messages {
			return fmt.Sprintf("partition %d: written %d/%d durable %d/%d messages %d/%d", i,
				p.WrittenNext, q.WrittenNext, p.DurableNext, q.DurableNext, p.Messages, q.Messages)
		}
	}
	return ""
}
