package admin

import (
	"testing"

	"github.com/fibril-edge/fibril/appliance"
)

// The quarantine gauge counts the ranges the log still retains: a range
// retention moved past drops from it, while the counter keeps it.
func TestRetainedQuarantine(t *testing.T) {
	p := appliance.PartitionInfo{Head: 15, Quarantined: []appliance.Quarantined{{FromOffset: 5, ToOffset: 10}, {FromOffset: 20, ToOffset: 30}}}
	if got := retainedQuarantine(p); got != 1 {
		t.Fatalf("retained ranges %d, want 1 (the one past the head)", got)
	}
	p.Head = 0
	if got := retainedQuarantine(p); got != 2 {
		t.Fatalf("retained ranges %d with the head at 0, want 2", got)
	}
}
