package replication

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestConsistentEnd(t *testing.T) {
	// The owner: instance 7 wrote 0..100, instance 8 (after a power cut
	// that lost 100..150) writes from 100.
	owner := History{{7, 0, 0}, {8, 100, 0}}
	for _, tc := range []struct {
		name       string
		copy       History
		start, end uint64
		want       uint64
	}{
		{"empty copy", nil, 0, 0, 0},
		{"copy of instance 7, within its run", History{{7, 0, 0}}, 0, 80, 80},
		{"copy of instance 7 up to the cut", History{{7, 0, 0}}, 0, 100, 100},
		{"copy of instance 7 past the cut: diverged where 8 began", History{{7, 0, 0}}, 0, 150, 100},
		{"copy that took 8 too", History{{7, 0, 0}, {8, 100, 0}}, 0, 130, 130},
		{"copy of an instance the owner never had", History{{7, 0, 0}, {9, 60, 0}}, 0, 90, 60},
		{"legacy copy against an owner with a history", nil, 10, 20, 10},
		{"legacy copy against a legacy owner", nil, 10, 20, 20},
		{"copy starting inside 8's run", History{{8, 120, 0}}, 120, 140, 140},
		{"copy that says 8 wrote below where 8 began", History{{8, 90, 0}}, 90, 140, 90},
	} {
		o := owner
		if tc.name == "legacy copy against a legacy owner" {
			o = History{}.Start(0)
		}
		if got := ConsistentEnd(tc.copy, tc.start, tc.end, o); got != tc.want {
			t.Errorf("%s: consistent to %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestHistoryBeginAndAdopt(t *testing.T) {
	h := History{}.Start(5).Begin(7, 40).Begin(8, 90)
	if want := (History{{0, 5, 0}, {7, 40, 0}, {8, 90, 0}}); !slices.Equal(h, want) {
		t.Fatalf("begin: %v, want %v", h, want)
	}
	// Reopened at 60 after a cut: 8's run (from 90) is gone.
	if got, want := h.Begin(9, 60), (History{{0, 5, 0}, {7, 40, 0}, {9, 60, 0}}); !slices.Equal(got, want) {
		t.Fatalf("begin after a cut: %v, want %v", got, want)
	}
	// A copy ending at 50 adopts the owner's history from 50 on.
	copyH := History{{0, 5, 0}, {7, 40, 0}}
	if got, want := copyH.Adopt(History{{0, 5, 0}, {7, 40, 0}, {9, 60, 0}}, 50), (History{{0, 5, 0}, {7, 40, 0}, {9, 60, 0}}); !slices.Equal(got, want) {
		t.Fatalf("adopt: %v, want %v", got, want)
	}
	// An empty copy at 70 takes only the instance writing there, whole:
	// another copy's records of 9 from 60 on stay a prefix of it.
	if got, want := (History{}).Adopt(History{{7, 0, 0}, {9, 60, 0}}, 70), (History{{9, 60, 0}}); !slices.Equal(got, want) {
		t.Fatalf("adopt into an empty copy: %v, want %v", got, want)
	}
}

func TestHistoryFile(t *testing.T) {
	fs := vfs.NewMem()
	if h, err := LoadHistory(fs, "d"); err != nil || h != nil {
		t.Fatalf("missing history: %v, %v", h, err)
	}
	want := History{{0, 5, 0}, {7, 40, 2}, {9, 60, 4}}
	if err := SaveHistory(fs, "d", want); err != nil {
		t.Fatal(err)
	}
	got, err := LoadHistory(fs, "d")
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("load: %v, %v; want %v", got, err, want)
	}
	b := want.encode()
	for i := range b {
		d := slices.Clone(b)
		d[i] ^= 0x10
		if _, err := decodeHistory(d); !errors.Is(err, ErrHistory) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
	}
}

func TestHistoryEpochs(t *testing.T) {
	h := History{}.Start(0).Begin(7, 0).Installed(2).Begin(9, 60).Installed(5).Begin(11, 80)
	for end, want := range map[uint64]uint64{0: 0, 1: 2, 60: 2, 61: 5, 80: 5, 81: 0} {
		if got := h.LastEpoch(end); got != want {
			t.Errorf("LastEpoch(%d) = %d, want %d", end, got, want)
		}
	}
	// A file written before epochs (16-byte intervals) reads as epoch 0.
	old := []byte{0, 0, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 40, 0, 0, 0, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(old, crc32.Checksum(old[4:], historyCRC))
	got, err := decodeHistory(old)
	if err != nil || !slices.Equal(got, History{{7, 40, 0}}) {
		t.Fatalf("old history: %v, %v", got, err)
	}
}

// An empty copy started at the owner's head (wiped, or placed after
// retention moved the head) takes the owner's history whole. When it
// later owns the partition, a copy holding the same instance's records
// from below that head is a prefix of its log, not cut back to its head.
func TestRebasedCopyKeepsTheOwnersIntervalsWhole(t *testing.T) {
	owner := History{{Instance: 7, From: 0, Epoch: 1}}
	rebased := History(nil).Start(5000).Adopt(owner, 5000)
	if len(rebased) != 1 || rebased[0] != owner[0] {
		t.Fatalf("the empty copy at 5000 adopted %+v, want the owner's %+v", rebased, owner)
	}
	newOwner := rebased.Begin(9, 9000).Installed(2)
	other := History{{Instance: 7, From: 0, Epoch: 1}}
	if at := ConsistentEnd(other, 4900, 9000, newOwner); at != 9000 {
		t.Fatalf("a copy of instance 7 from 4900 to 9000 judged diverged at %d against %+v", at, newOwner)
	}
	// A copy keeping records of its own below from still has the owner's
	// interval clipped where its own end.
	mixed := History{{Instance: 3, From: 0, Epoch: 1}}.Adopt(History{{Instance: 3, From: 0, Epoch: 1}, {Instance: 7, From: 100, Epoch: 2}}, 50)
	if len(mixed) != 2 || mixed[0].Instance != 3 || mixed[1] != (Interval{Instance: 7, From: 100, Epoch: 2}) {
		t.Fatalf("a copy holding instance 3 below 50 adopted %+v", mixed)
	}
}
