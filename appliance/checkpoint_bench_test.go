package appliance

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fibril-edge/fibril/wal"
)

// BenchmarkCheckpointPass checkpoints 500 queues that each took one
// publish since their last checkpoint: the pass a broker with many quiet
// queues runs every CheckpointDelay. The queues are durable, so that
// their logs are synced when the pass starts, as a quiet queue's are by
// then: what the pass costs is its snapshots.
func BenchmarkCheckpointPass(b *testing.B) {
	ctx := testCtx(b)
	const queues = 500
	br, closeGroup := openOnDisk(b)
	defer closeGroup()
	defer br.Close()
	for i := range queues {
		declare(b, ctx, br, QueueConfig{Name: fmt.Sprintf("q%d", i)})
	}
	b.ResetTimer()
	for n := range b.N {
		b.StopTimer()
		for i := range queues {
			publish(b, ctx, br, fmt.Sprintf("q%d", i), Message{Body: body(n)})
		}
		b.StartTimer()
		if err := br.Checkpoint(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCloseManyQueues closes a broker whose 300 queues each took a
// publish since their last checkpoint: what a shutdown under systemd waits
// for (every partition checkpointed, every log synced and closed).
func BenchmarkCloseManyQueues(b *testing.B) {
	ctx := testCtx(b)
	const queues = 300
	for range b.N {
		b.StopTimer()
		br, closeGroup := openOnDisk(b)
		for i := range queues {
			name := fmt.Sprintf("q%d", i)
			declare(b, ctx, br, QueueConfig{Name: name})
			publish(b, ctx, br, name, Message{Body: body(i)})
		}
		b.StartTimer()
		if err := br.Close(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		closeGroup()
	}
}

// openOnDisk opens a broker on the real file system under a temporary
// directory, with the node's sync group where the file system has one, as
// fibrild runs; closeGroup closes the group, after the broker.
func openOnDisk(b *testing.B) (br *Broker, closeGroup func()) {
	dir := b.TempDir()
	opts := Options{Logger: quietLogger(), CheckpointDelay: time.Hour}
	closeGroup = func() {}
	if g, err := wal.NewSyncGroup(dir, wal.SyncGroupOptions{}); err == nil {
		opts.SyncGroup = g
		closeGroup = func() { g.Close() }
	}
	return openBroker(b, vfs.Default, dir, opts), closeGroup
}
