// Package waltest holds helpers for tests that compare segment logs.
package waltest

import (
	"testing"

	"github.com/fibril-edge/fibril/wal"
)

// Records reads the records at offsets [0, upTo) of l at its written
// frontier, failing the test when any is missing.
func Records(t testing.TB, l *wal.Log, upTo uint64) []wal.Record {
	t.Helper()
	return Range(t, l, 0, upTo)
}

// Range reads the records at offsets [from, upTo) of l at its written
// frontier, failing the test when any is missing.
func Range(t testing.TB, l *wal.Log, from, upTo uint64) []wal.Record {
	t.Helper()
	var out []wal.Record
	for next := from; next < upTo; {
		recs, err := l.ReadWritten(next, 4<<20)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			t.Fatalf("no records at %d, want up to %d", next, upTo)
		}
		out = append(out, recs...)
		next = recs[len(recs)-1].Offset + 1
	}
	return out[:upTo-from]
}
