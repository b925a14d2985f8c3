package wal

import (
	"fmt"
	"testing"
)

// The tail cache holds at most its budget: the newest records, in whole
// blocks, and none of a record larger than the budget.
func TestTailCacheBudget(t *testing.T) {
	for _, tc := range []struct {
		budget  int64
		recSize int
	}{{4 << 10, 100}, {4 << 10, 10 << 10}, {64 << 10, 1000}, {1, 10}} {
		t.Run(fmt.Sprintf("budget-%d-record-%d", tc.budget, tc.recSize), func(t *testing.T) {
			c, _ := newTailCache(tc.budget)
			const n = 1000
			var next uint64
			for next < n {
				// Batches of 1 to 7 records, as group writes hand them over.
				k := min(int(next%7)+1, n-int(next))
				recs := make([]Record, k)
				for i := range k {
					recs[i] = Record{Offset: next + uint64(i), Type: 1, Payload: payload(int(next)+i, tc.recSize)}
				}
				c.put(recs)
				next += uint64(k)
				c.mu.RLock()
				cost := c.cost
				c.mu.RUnlock()
				if cost > tc.budget {
					t.Fatalf("after offset %d the cache holds %d bytes, budget %d", next, cost, tc.budget)
				}
			}
			hits, lastMiss := 0, -1
			for o := range n {
				rec, ok := c.get(uint64(o))
				if !ok {
					lastMiss = o
					continue
				}
				hits++
				if rec.Offset != uint64(o) || string(rec.Payload) != string(payload(o, tc.recSize)) {
					t.Fatalf("record %d from the cache differs", o)
				}
			}
			if hits != n-1-lastMiss {
				t.Fatalf("%d hits, last miss at %d: the cache is not the newest records", hits, lastMiss)
			}
			if int64(tc.recSize) <= tc.budget/2 && hits == 0 {
				t.Fatalf("nothing cached with a %d-byte budget and %d-byte records", tc.budget, tc.recSize)
			}
			c.close()
			if _, ok := c.get(n - 1); ok {
				t.Fatal("a closed cache still answers")
			}
		})
	}
}
