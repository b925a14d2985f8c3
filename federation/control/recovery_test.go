package control

import (
	"slices"
	"testing"

	"github.com/fibril-edge/fibril/appliance"
)

// declareQ declares a queue of two partitions on three members under p.
func declareQ(t *testing.T, s *State, p Policy) []Assignment {
	t.Helper()
	s.Applied = 10
	if _, _, err := s.declare(appliance.QueueConfig{Name: "q", Partitions: 2, Durability: appliance.Buffered}, p, nil); err != nil {
		t.Fatal(err)
	}
	return s.Assignments["q"]
}

func sealAll(t *testing.T, s *State, node string, epoch uint64, seals ...Seal) {
	t.Helper()
	if err := s.seal(SealReport{Queue: "q", Epoch: epoch, Node: node, Seals: seals}); err != nil {
		t.Fatal(err)
	}
}

func TestRecoveryInstallsTheBestWitnessOnceESubWPlusOneSealed(t *testing.T) {
	s := threeMembers(t)
	as := declareQ(t, s, Policy{Kind: ReplicaBuffered, N: 2}) // E=3, W=2: 2 seals
	old, e := as[0].Owner, as[0].Epoch
	if err := s.recover(Recover{Queue: "q", Epoch: e, Reason: "owner unreachable", At: 1}); err != nil {
		t.Fatal(err)
	}
	// A second proposer for the same epoch changes nothing.
	if err := s.recover(Recover{Queue: "q", Epoch: e, At: 2}); err != nil {
		t.Fatal(err)
	}
	a := s.Assignments["q"][0]
	if !a.Sealing || a.Epoch != e+1 || a.SealsNeeded() != 2 {
		t.Fatalf("after recover: sealing %v epoch %d needs %d", a.Sealing, a.Epoch, a.SealsNeeded())
	}
	f1, f2 := a.Followers[0], a.Followers[1]
	// A stale report, and one from a node without a copy, count nothing.
	sealAll(t, s, f1, e, Seal{End: 99, Witness: true}, Seal{End: 99, Witness: true})
	sealAll(t, s, "n9", e+1, Seal{End: 99, Witness: true}, Seal{End: 99, Witness: true})
	// A copy that is no witness (wiped, catching up) does not count either.
	sealAll(t, s, f2, e+1, Seal{End: 500, LastEpoch: e, Witness: false}, Seal{End: 500, LastEpoch: e, Witness: false})
	sealAll(t, s, f1, e+1, Seal{End: 40, LastEpoch: e, Witness: true}, Seal{End: 7, LastEpoch: e, Witness: true})
	if a := s.Assignments["q"][0]; !a.Sealing || a.Witnesses(appliance.Buffered) != 1 {
		t.Fatalf("installed with %d witnesses of %d needed", a.Witnesses(appliance.Buffered), a.SealsNeeded())
	}
	// The old owner, back after a power cut with a longer log of an older
	// epoch, loses to the newer epoch's shorter one.
	sealAll(t, s, old, e+1, Seal{End: 90, LastEpoch: e - 1, Witness: true}, Seal{End: 90, LastEpoch: e - 1, Witness: true})
	for i, a := range s.Assignments["q"] {
		if a.Sealing || a.Owner != f1 || a.Epoch != e+1 || a.Replicas() != 3 || !slices.Contains(a.Followers, old) {
			t.Fatalf("partition %d after the seals: %+v", i, a)
		}
	}
	lf := s.Queues["q"].LastFailover
	if lf == nil || lf.From != old || lf.To != f1 || lf.Epoch != e+1 || lf.StartedAt != 1 {
		t.Fatalf("last failover %+v", lf)
	}
}

// A buffered queue confirms on copies that wrote a record, not synced it:
// a copy whose process restarted (Cut) may have lost such records, so it
// does not count toward E-W+1. With too few live copies the recovery
// waits for every copy and installs the longest durable history; a
// durable queue counts cut copies, which keep what they synced.
func TestBufferedRecoveryCountsOnlyLiveWitnesses(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind PolicyKind
		// installedAfterFollowers: installed on the followers' seals
		// (one live, one cut) without the old owner's.
		installedAfterFollowers bool
	}{
		{"buffered", ReplicaBuffered, false},
		{"durable", ReplicaDurable, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := threeMembers(t)
			mode := appliance.Buffered
			if tc.kind == ReplicaDurable {
				mode = appliance.Durable
			}
			s.Applied = 10
			if _, _, err := s.declare(appliance.QueueConfig{Name: "q", Partitions: 2, Durability: mode}, Policy{Kind: tc.kind, N: 2}, nil); err != nil {
				t.Fatal(err)
			}
			as := s.Assignments["q"]
			old, e := as[0].Owner, as[0].Epoch
			if err := s.recover(Recover{Queue: "q", Epoch: e}); err != nil {
				t.Fatal(err)
			}
			f1, f2 := as[0].Followers[0], as[0].Followers[1]
			sealAll(t, s, f1, e+1, Seal{End: 10, LastEpoch: e, Witness: true, Cut: true}, Seal{End: 10, LastEpoch: e, Witness: true, Cut: true})
			sealAll(t, s, f2, e+1, Seal{End: 20, LastEpoch: e, Witness: true}, Seal{End: 20, LastEpoch: e, Witness: true})
			a := s.Assignments["q"][0]
			if installed := !a.Sealing; installed != tc.installedAfterFollowers {
				t.Fatalf("after one cut and one live follower seal: installed %v, want %v (%d of %d counted)",
					installed, tc.installedAfterFollowers, a.Witnesses(mode), a.SealsNeeded())
			}
			if tc.installedAfterFollowers {
				if a.Owner != f2 {
					t.Fatalf("owner %s, want the longest copy %s", a.Owner, f2)
				}
				return
			}
			if a.Witnesses(mode) != 1 {
				t.Fatalf("%d seals counted, want the live one only", a.Witnesses(mode))
			}
			// The old owner, back after the power cut with the most it
			// had synced: every copy has sealed, and its history wins.
			sealAll(t, s, old, e+1, Seal{End: 30, LastEpoch: e, Witness: true, Cut: true}, Seal{End: 30, LastEpoch: e, Witness: true, Cut: true})
			for i, a := range s.Assignments["q"] {
				if a.Sealing || a.Owner != old || a.Epoch != e+1 {
					t.Fatalf("partition %d after every copy sealed: %+v", i, a)
				}
			}
		})
	}
}

// A seal syncs what the copy holds: the report of a node that restarted
// after it sealed (now cut) does not take the place of its live one.
func TestLaterCutSealKeepsTheLiveOne(t *testing.T) {
	s := threeMembers(t)
	as := declareQ(t, s, Policy{Kind: ReplicaBuffered, N: 2})
	e := as[0].Epoch
	if err := s.recover(Recover{Queue: "q", Epoch: e}); err != nil {
		t.Fatal(err)
	}
	f1 := as[0].Followers[0]
	sealAll(t, s, f1, e+1, Seal{End: 10, LastEpoch: e, Witness: true}, Seal{End: 10, LastEpoch: e, Witness: true})
	sealAll(t, s, f1, e+1, Seal{End: 10, LastEpoch: e, Witness: true, Cut: true}, Seal{End: 10, LastEpoch: e, Witness: true, Cut: true})
	if a := s.Assignments["q"][0]; a.Witnesses(appliance.Buffered) != 1 || a.Seals[0].Cut {
		t.Fatalf("the later cut report replaced the live one: %+v", a.Seals)
	}
}

// A live copy that a storage failure cut back at its seal knows what it
// had acknowledged (Acked): it counts only while another sealed copy
// holds that far.
func TestCutBackCopyCountsWhileAnotherHoldsWhatItLost(t *testing.T) {
	for _, tc := range []struct {
		name      string
		otherEnd  uint64
		installed bool
	}{{"other holds it", 50, true}, {"nobody holds it", 30, false}} {
		t.Run(tc.name, func(t *testing.T) {
			s := threeMembers(t)
			as := declareQ(t, s, Policy{Kind: ReplicaBuffered, N: 2})
			e := as[0].Epoch
			if err := s.recover(Recover{Queue: "q", Epoch: e}); err != nil {
				t.Fatal(err)
			}
			f1, f2 := as[0].Followers[0], as[0].Followers[1]
			cutBack := Seal{End: 20, LastEpoch: e, Witness: true, Acked: 40}
			other := Seal{End: tc.otherEnd, LastEpoch: e, Witness: true, Acked: tc.otherEnd}
			sealAll(t, s, f1, e+1, cutBack, cutBack)
			sealAll(t, s, f2, e+1, other, other)
			if a := s.Assignments["q"][0]; a.Sealing == tc.installed {
				t.Fatalf("installed %v, want %v: %+v", !a.Sealing, tc.installed, a)
			}
		})
	}
}

func TestRecoveryNeverLowersW(t *testing.T) {
	s := threeMembers(t)
	as := declareQ(t, s, Policy{Kind: ReplicaDurable, N: 2}) // 2 seals needed
	e := as[0].Epoch
	if err := s.recover(Recover{Queue: "q", Epoch: e}); err != nil {
		t.Fatal(err)
	}
	sealAll(t, s, as[0].Followers[0], e+1, Seal{End: 5, Witness: true}, Seal{End: 5, Witness: true})
	if a := s.Assignments["q"][0]; !a.Sealing {
		t.Fatalf("installed on one seal of two needed: %+v", a)
	}
	// A member joining meanwhile adds no copy to a sealing partition.
	if err := s.addMember(Member{ID: "n4", ClusterAddr: "n4:7000"}); err != nil {
		t.Fatal(err)
	}
	if n := s.Assignments["q"][0].Replicas(); n != 3 {
		t.Fatalf("a sealing partition has %d copies", n)
	}
}

func TestRecoveryWithOneCopyIsTheOwnerAlone(t *testing.T) {
	s := threeMembers(t)
	if err := s.setSettings(map[string]string{"replicas": "1"}); err != nil {
		t.Fatal(err)
	}
	as := declareQ(t, s, Policy{})
	e, owner := as[0].Epoch, as[0].Owner
	if err := s.recover(Recover{Queue: "q", Epoch: e}); err != nil {
		t.Fatal(err)
	}
	sealAll(t, s, owner, e+1, Seal{End: 3, LastEpoch: e, Witness: true}, Seal{End: 0, LastEpoch: 0, Witness: true})
	if a := s.Assignments["q"][1]; a.Sealing || a.Owner != owner {
		t.Fatalf("after its own seal: %+v", a)
	}
}

// A queue whose copies all sealed with no copy anywhere never had a record:
// its placement's owner starts it afresh rather than the queue waiting for
// witnesses that cannot exist. One copy missing is not enough.
func TestRecoveryOfAQueueNeverWritten(t *testing.T) {
	s := threeMembers(t)
	as := declareQ(t, s, Policy{Kind: ReplicaDurable, N: 2})
	e, owner := as[0].Epoch, as[0].Owner
	if err := s.recover(Recover{Queue: "q", Epoch: e}); err != nil {
		t.Fatal(err)
	}
	none := Seal{NoCopy: true}
	sealAll(t, s, as[0].Followers[0], e+1, none, none)
	sealAll(t, s, as[0].Followers[1], e+1, none, none)
	if !s.Assignments["q"][0].Sealing {
		t.Fatal("installed with one copy not sealed")
	}
	sealAll(t, s, owner, e+1, none, none)
	if a := s.Assignments["q"][1]; a.Sealing || a.Owner != owner || a.Epoch != e+1 {
		t.Fatalf("after every copy sealed empty: %+v", a)
	}
}

// A queue's partitions share their copies: one owner is installed for
// all of them from the copies they have in common.
func TestPartitionsShareTheirCopies(t *testing.T) {
	s := threeMembers(t)
	if err := s.addMember(Member{ID: "n4", ClusterAddr: "n4:7000"}); err != nil {
		t.Fatal(err)
	}
	s.Applied = 10
	if _, _, err := s.declare(appliance.QueueConfig{Name: "wide", Partitions: 4}, Policy{}, nil); err != nil {
		t.Fatal(err)
	}
	as := s.Assignments["wide"]
	for _, a := range as[1:] {
		if !slices.Equal(a.Copies(), as[0].Copies()) {
			t.Fatalf("partition %d has copies %v, partition 0 %v", a.Partition, a.Copies(), as[0].Copies())
		}
	}
	if err := s.setSettings(map[string]string{"replicas": "4"}); err != nil {
		t.Fatal(err)
	}
	for _, a := range s.Assignments["wide"] {
		if a.Replicas() != 4 || !slices.Equal(a.Copies(), s.Assignments["wide"][0].Copies()) {
			t.Fatalf("after replicas=4, partition %d has copies %v", a.Partition, a.Copies())
		}
	}
}

// A queue one partition of which no copy holds (its owner crashed while it
// created the partitions, or opened an older declaration with fewer): the
// other partitions' witnesses choose the owner, and the empty partition
// does not hold the recovery up.
func TestRecoveryWithAPartitionNeverWritten(t *testing.T) {
	s := threeMembers(t)
	as := declareQ(t, s, Policy{Kind: ReplicaDurable, N: 2})
	e, owner := as[0].Epoch, as[0].Owner
	if err := s.recover(Recover{Queue: "q", Epoch: e}); err != nil {
		t.Fatal(err)
	}
	none := Seal{NoCopy: true}
	held := Seal{End: 5, LastEpoch: e, Witness: true, Acked: 5}
	sealAll(t, s, as[0].Followers[0], e+1, held, none)
	sealAll(t, s, as[0].Followers[1], e+1, Seal{End: 3, LastEpoch: e, Witness: true, Acked: 3}, none)
	if !s.Assignments["q"][1].Sealing {
		t.Fatal("installed before every copy of the empty partition sealed")
	}
	sealAll(t, s, owner, e+1, none, none)
	a := s.Assignments["q"][1]
	if a.Sealing || a.Owner != as[0].Followers[0] || a.Epoch != e+1 {
		t.Fatalf("after every copy sealed: %+v, want %s (the best witness of partition 0) installed at epoch %d", a, as[0].Followers[0], e+1)
	}
}
