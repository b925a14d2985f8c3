package appliance

import (
	"bytes"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/fibril-edge/fibril/wal"
)

// A consumer that falls behind its publishers, past its partition's small
// tail cache, reads the messages it missed from the node's read cache
// rather than the segment files, whole and in order; with the read cache
// off, from the files.
func TestTrailingConsumerReadsFromTheReadCache(t *testing.T) {
	for _, budget := range []int64{4 << 20, -1} {
		ctx := testCtx(t)
		b := openBroker(t, vfs.NewMem(), "data", Options{TailCacheBytes: 32 << 10, ReadCacheBytes: budget})
		declare(t, ctx, b, QueueConfig{Name: "t", Durability: Buffered})
		sub, got := subscribe(t, b, "t", 1)
		padded := func(i int) []byte { return append(body(i), bytes.Repeat([]byte{'.'}, 200)...) }
		const rounds, per = 40, 50
		next := 0
		take := func() {
			t.Helper()
			d := got.next(t, ctx)
			if !bytes.Equal(d.Body, padded(next)) {
				t.Fatalf("delivery %d: %q", next, d.Body[:14])
			}
			if err := sub.Ack(d.Tag); err != nil {
				t.Fatal(err)
			}
			next++
		}
		for r := range rounds {
			for i := range per {
				publish(t, ctx, b, "t", Message{Body: padded(r*per + i)})
			}
			take() // one of fifty: the consumer falls behind
		}
		for next < rounds*per {
			take()
		}
		sub.Close()
		p := info(t, b, "t").Partitions[0].Log
		rc := b.ReadCache()
		t.Logf("read cache %d bytes: partition tail hits %d, misses %d, read cache hits %d; node %+v", budget, p.TailCacheHits, p.TailCacheMisses, p.ReadCacheHits, rc)
		if budget > 0 && (p.ReadCacheHits < p.TailCacheMisses/2 || rc.Hits != p.ReadCacheHits || rc.Budget != budget) {
			t.Fatalf("with the read cache: %d of %d tail misses read from it (node: %+v)", p.ReadCacheHits, p.TailCacheMisses, rc)
		}
		if budget < 0 && (p.ReadCacheHits != 0 || rc != (wal.ReadCacheStats{})) {
			t.Fatalf("with the read cache off: %d hits, node %+v", p.ReadCacheHits, rc)
		}
		if p.TailCacheMisses == 0 {
			t.Fatal("the consumer never missed the tail cache")
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
