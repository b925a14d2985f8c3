package pebblesched

import (
	"context"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestCompactsWithoutTicker fills a database past many flushes and checks
// that compactions ran and the data reads back after a reopen.
func TestCompactsWithoutTicker(t *testing.T) {
	fs := vfs.NewMem()
	open := func() *pebble.DB {
		opts := &pebble.Options{FS: fs, MemTableSize: 256 << 10, L0CompactionThreshold: 2}
		opts.Experimental.CompactionScheduler = New()
		db, err := pebble.Open("db", opts)
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	db := open()
	val := make([]byte, 1024)
	const n = 6000
	for i := range n {
		if err := db.Set([]byte(fmt.Sprintf("k%06d", i)), val, pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		if i%500 == 499 {
			if err := db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := db.Compact(context.Background(), []byte("k"), []byte("l"), true); err != nil { // a manual compaction goes through the scheduler too
		t.Fatal(err)
	}
	if c := db.Metrics().Compact.Count; c == 0 {
		t.Fatal("no compaction ran")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = open()
	defer db.Close()
	for _, i := range []int{0, n / 2, n - 1} {
		v, closer, err := db.Get([]byte(fmt.Sprintf("k%06d", i)))
		if err != nil || len(v) != len(val) {
			t.Fatalf("key %d after reopen: %d bytes, %v", i, len(v), err)
		}
		closer.Close()
	}
}
