package federation

import (
	"strings"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/wal"
)

// A buffered queue's owner loses its power: it comes back at its last
// sync, shorter than both followers, whose copies hold records it no
// longer has. Its next publish lands at an offset where the followers
// hold other bytes, so neither may count for it: each refuses the stream
// as diverged, the gate counts neither, and the publish stays unconfirmed
// (recovery, not streaming, decides which history the cluster keeps).
// Before copies kept their owner's history, the owner fed each follower's
// position to its gate before checking it, and confirmed the new record
// "written on 2 of 3" against a copy holding different bytes.
func TestOwnerBackShorterIsNotCountedByDivergedCopies(t *testing.T) {
	nodes := startNodes(t, 3, nodeOptions{})
	owner := nodes.declare(t, "n1", appliance.QueueConfig{Name: "cut", Durability: appliance.Buffered}, "replica_buffered:2")
	settings := owner.broker.Settings()
	settings.BackgroundSyncIntervalMs = 0 // nothing syncs the owner's log but the test
	if err := owner.broker.UpdateSettings(settings); err != nil {
		t.Fatal(err)
	}
	publishN(t, owner.broker, "cut", "synced", 20)
	ol, _ := owner.cluster.OwnerLog("cut", 0)
	if err := ol.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	synced := ol.DurableNext()
	publishN(t, owner.broker, "cut", "lost", 30)
	nodes.copiesMatch(t, "cut", (*wal.Log).WrittenNext) // both followers hold all 50
	if ol.DurableNext() != synced {
		t.Fatalf("the owner synced past %d (at %d) before its power cut", synced, ol.DurableNext())
	}

	owner.powerCut(t)
	ol, ok := owner.cluster.OwnerLog("cut", 0)
	await.Within(t, 30*time.Second, "the owner to serve again", func() bool {
		ol, ok = owner.cluster.OwnerLog("cut", 0)
		return ok
	})
	if end := ol.WrittenNext(); end != synced {
		t.Fatalf("after the power cut the owner's log ends at %d, want its last sync %d", end, synced)
	}
	confirmed := make(chan error, 1)
	owner.broker.PublishAsync("cut", appliance.Message{Body: []byte("after the cut")},
		func(_ appliance.Confirm, err error) { confirmed <- err })

	op, g := owner.cluster.ownedGate("cut", 0)
	var outcome error
	done := false
	await.Within(t, time.Minute, "the publish to confirm, or both followers to refuse the owner's stream as diverged", func() bool {
		select {
		case outcome = <-confirmed:
			done = true
			return true
		default:
		}
		if g == nil {
			op, g = owner.cluster.ownedGate("cut", 0)
			return false
		}
		stats := op.streamStats()
		n := 0
		for _, st := range stats {
			if st.Refusals > 0 && strings.Contains(st.LastRefusal, "diverged") {
				n++
			}
		}
		return n == 2
	})
	if !done {
		select {
		case outcome = <-confirmed:
			done = true
		default:
		}
	}
	if done {
		t.Fatalf("the publish at offset %d completed (err %v) although every follower holds other bytes there", synced, outcome)
	}
	for f, p := range g.Positions() {
		if p.Written > synced {
			t.Fatalf("the gate counts %s at %d, past the owner's log end %d", f, p.Written, synced)
		}
	}
	if ceil := g.Ceiling(); ceil > synced {
		t.Fatalf("visibility ceiling %d past the owner's end %d: a record only the owner holds would be delivered", ceil, synced)
	}
}
