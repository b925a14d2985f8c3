package acceptance

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Case 2, the ext4 remains: a power cut on ext4 can leave a segment file
// whose creation was journaled but not its size or header (zero-length),
// and a tail of zeros after the last record. The cuts of TestPowerCut
// leave zero-filled tails in every run (segments are preallocated) but
// rarely a zero-length file, so this case plants one where the next
// segment would start, on both queues, after a SIGKILL. Recovery must
// treat it as the empty active segment: keep every message, drop no
// queue, and go on appending.
func TestRecoveryAcceptsEmptySegment(t *testing.T) {
	ctx := caseCtx(t, 2*time.Minute)
	e := newCaseEnv(t, ctx, "")
	queues := []QueueSpec{{Name: "empty-durable"}, {Name: "empty-buffered", Buffered: true}}
	e.publishBatch(ctx, queues, "before", 300)
	ends := map[string]uint64{}
	for _, q := range queues {
		qi, err := e.b.QueueInfo(ctx, q.Name)
		if err != nil {
			t.Fatal(err)
		}
		ends[q.Name] = qi.Partitions[0].WrittenNext
	}
	e.kill()
	for _, q := range queues {
		path := filepath.Join(e.b.DataDir, "queues", q.Name, "0", fmt.Sprintf("%020d.seg", ends[q.Name]))
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		e.schedule("planted the zero-length segment %s", path)
	}
	e.restart(ctx)
	checkServed(t, ctx, e.b, queues)
	for _, q := range queues {
		qi, err := e.b.QueueInfo(ctx, q.Name)
		if err != nil {
			t.Fatal(err)
		}
		if got := qi.Partitions[0].WrittenNext; got != ends[q.Name] {
			t.Fatalf("%s: the log ends at %d after recovery, want %d", q.Name, got, ends[q.Name])
		}
	}
	e.publishBatch(ctx, queues, "after", 300)
	rep := e.verify(ctx, queues)
	if len(rep.Lost) != 0 {
		t.Fatalf("%d messages lost", len(rep.Lost))
	}
}
