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
	if a := s.Assignments["q"][0]; !a.Sealing || a.Witnesses() != 1 {
		t.Fatalf("installed with %d witnesses of %d needed", a.Witnesses(), a.SealsNeeded())
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
