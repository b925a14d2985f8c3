package acceptance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
)

// Case 4: consumer state after a power cut. Each cycle acks a first part
// of a batch and waits until the acks are applied and synced, then goes
// on publishing and acking, holds some deliveries unsettled, and cuts the
// power. After the restart:
//   - nothing resets a queue to its start: no ack that was synced before
//     the cut comes back;
//   - nothing is stuck: the held deliveries come back and the drain
//     settles every message;
//   - settles are never persisted ahead of the messages they settle: the
//     messages published after the restart (which take the offsets the cut
//     lost) are all delivered, none is taken as already settled.
func TestPowerCutConsumerState(t *testing.T) {
	for _, fsType := range []string{"xfs", "ext4"} {
		t.Run(fsType, func(t *testing.T) {
			ctx := caseCtx(t, 2*time.Minute)
			e := newCaseEnv(t, ctx, fsType, "--storage.segment_size", "1MiB", "--storage.checkpoint_delay", "300ms")
			queues := bothModes("cons")
			synced := map[string]int{} // IDs whose acks were synced before a cut → epoch of that ack
			for i := range 3 {
				e.publishBatch(ctx, queues, fmt.Sprint("s", i), 300)
				for _, q := range queues {
					for _, id := range e.ackSynced(ctx, q.Name, 100) {
						synced[id] = i // cycle i runs in epoch i
					}
				}
				e.publishBatch(ctx, queues, fmt.Sprint("u", i), 300)
				held := e.holdAndAck(ctx, queues, 50, 50)
				if err := RecordFrontiers(ctx, e.h, e.b.Admin(), queues); err != nil {
					t.Fatal(err)
				}
				e.schedule("cycle %d: power cut with deliveries held", i)
				e.powerCut(ctx)
				for _, c := range held {
					c.Close()
				}
				e.restart(ctx)
			}
			e.publishBatch(ctx, queues, "after", 300)
			rep := e.verify(ctx, queues)
			for _, r := range rep.AckedReturned {
				if ep, ok := synced[r.ID]; ok && ep == r.AckEpoch {
					t.Fatalf("%s: acked, synced before the cut, and delivered again: the queue went back", r.ID)
				}
			}
			logLosses(t, rep, queues)
			for _, l := range rep.Lost {
				if l.Epoch == rep.Restarts {
					t.Fatalf("published after the last restart and never delivered: %s", l)
				}
			}
		})
	}
}

// publishBatch publishes at least n messages to every queue (one
// publisher each, prefix naming them) and waits for their confirms.
func (e *caseEnv) publishBatch(ctx context.Context, queues []QueueSpec, prefix string, n int64) {
	e.t.Helper()
	for _, q := range queues {
		r, err := StartLoad(ctx, LoadOptions{Addr: e.b.Addr(), History: e.h, Queues: []QueueSpec{q}, Consumers: -1,
			Publishers: 1, Seed: e.seed, Prefix: prefix, BodySize: 300})
		if err != nil {
			e.t.Fatal(err)
		}
		err = r.WaitConfirmed(ctx, n)
		r.Stop()
		if err != nil {
			e.t.Fatal(err)
		}
	}
}

// ackSynced acks n deliveries of queue and waits until the broker has
// applied the acks and every partition's durable frontier has reached its
// written one; it returns the acked IDs.
func (e *caseEnv) ackSynced(ctx context.Context, queue string, n int) []string {
	e.t.Helper()
	before, err := e.b.QueueInfo(ctx, queue)
	if err != nil {
		e.t.Fatal(err)
	}
	start := len(e.ackedIDs)
	e.ackSome(ctx, queue, n)
	err = awaitQueue(ctx, e.b, queue, func(qi QueueInfo) bool {
		if qi.Messages != before.Messages-int64(n) || qi.InFlight != 0 {
			return false
		}
		for _, p := range qi.Partitions {
			if p.DurableNext < p.WrittenNext {
				return false
			}
		}
		return true
	})
	if err != nil {
		e.t.Fatalf("%s: acks not applied and synced: %v", queue, err)
	}
	return e.ackedIDs[start:]
}

// holdAndAck opens a consumer per queue that acks the first ack
// deliveries and holds the next hold unsettled; it returns the clients,
// still connected.
func (e *caseEnv) holdAndAck(ctx context.Context, queues []QueueSpec, ack, hold int) []*client.Client {
	e.t.Helper()
	var out []*client.Client
	for _, q := range queues {
		c, err := client.Dial(ctx, e.b.Addr(), client.Options{Logger: quiet(), DisableReconnect: true})
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, c)
		cons, err := c.Consume(ctx, q.Name, ack+hold)
		if err != nil {
			e.t.Fatal(err)
		}
		for i := range ack + hold {
			select {
			case d, ok := <-cons.Messages():
				if !ok {
					e.t.Fatalf("%s: consumer ended: %v", q.Name, cons.Err())
				}
				e.h.Record(Event{Kind: KindDeliver, Queue: q.Name, ID: d.ID, Part: d.Partition, Off: d.Offset, N: d.Deliveries})
				if i < ack && d.Ack() == nil {
					e.h.Record(Event{Kind: KindAck, Queue: q.Name, ID: d.ID, Part: d.Partition, Off: d.Offset})
				}
			case <-ctx.Done():
				e.t.Fatal(ctx.Err())
			}
		}
	}
	return out
}
