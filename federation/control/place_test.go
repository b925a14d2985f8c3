package control

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/fibril-edge/fibril/appliance"
)

// applyAll feeds commands to f through raft's entry point, as the log
// does, failing on any command error.
func applyAll(t *testing.T, f *FSM, cmds ...Command) {
	t.Helper()
	for _, c := range cmds {
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if r := f.Apply(&raft.Log{Data: b}).(Result); r.Err != nil {
			t.Fatalf("apply %s: %v", c.Op, r.Err)
		}
	}
}

func addMember(id string) Command {
	return Command{Op: OpAddMember, Member: &Member{ID: id, ClusterAddr: id + ":7000", Voter: true}}
}

func declareCmd(name string, d appliance.Durability, partitions int, p Policy) Command {
	return Command{Op: OpDeclare, Queue: &appliance.QueueConfig{Name: name, Durability: d, Partitions: partitions}, Policy: p}
}

func stateJSON(t *testing.T, s *State) string {
	t.Helper()
	b, err := json.Marshal(s) // map keys come out sorted
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkCopies fails unless every partition has want copies, no two on one
// member, each on a member.
func checkCopies(t *testing.T, s *State, want int) {
	t.Helper()
	for name, as := range s.Assignments {
		for _, a := range as {
			hosts := append([]string{a.Owner}, a.Followers...)
			for i, h := range hosts {
				if _, ok := s.Members[h]; !ok || slices.Contains(hosts[i+1:], h) {
					t.Fatalf("%s/%d placed on %v", name, a.Partition, hosts)
				}
			}
			if a.Replicas() != want {
				t.Fatalf("%s/%d has %d copies (%+v), want %d", name, a.Partition, a.Replicas(), a, want)
			}
		}
	}
}

// Queues declared while the cluster had one member gain followers as
// members join; the owner, the epoch and a counted policy's N stay, and
// majority_durable counts the new copies.
func TestFillOnJoin(t *testing.T) {
	f := NewFSM(nil)
	applyAll(t, f, addMember("n1"),
		declareCmd("orders", appliance.Durable, 2, Policy{}),
		declareCmd("readings", appliance.Buffered, 1, Policy{}),
		declareCmd("audit", appliance.DurabilityUnspecified, 1, Policy{Kind: ReplicaDurable, N: 1}))
	s := f.State()
	checkCopies(t, s, 1)
	if d := s.Assignments["orders"][0].Describe(appliance.Durable); d != "durable on 1 of 1" {
		t.Fatalf("orders on one member: %q", d)
	}

	applyAll(t, f, addMember("n2"))
	s = f.State()
	checkCopies(t, s, 2)
	if d := s.Assignments["orders"][1].Describe(appliance.Durable); d != "durable on 2 of 2" {
		t.Fatalf("orders on two members: %q", d)
	}

	applyAll(t, f, addMember("n3"))
	s = f.State()
	checkCopies(t, s, 3)
	for name, want := range map[string]string{
		"orders":   "durable on 2 of 3",   // majority of the copies
		"readings": "written on 2 of 3",   // declared without a policy: a majority of the copies
		"audit":    "durable on 1 of 3"} { // replica_durable:1 keeps its N
		for _, a := range s.Assignments[name] {
			if a.Owner != "n1" || a.Epoch != 1 || a.Describe(s.Queues[name].Config.Durability) != want {
				t.Fatalf("%s/%d after joins: %+v reads %q, want owner n1, epoch 1, %q", name, a.Partition, a, a.Describe(s.Queues[name].Config.Durability), want)
			}
			if name == "readings" && s.Queues[name].Policy.String() != "replica_buffered:2" {
				t.Fatalf("readings' policy after joins: %s, want replica_buffered:2", s.Queues[name].Policy)
			}
			if fmt.Sprint(a.Followers) != "[n2 n3]" {
				t.Fatalf("%s/%d followers %v, want [n2 n3] (in joining order)", name, a.Partition, a.Followers)
			}
		}
	}

	// A fourth member finds every partition at the replication factor:
	// nothing moves.
	applyAll(t, f, addMember("n4"))
	after := f.State()
	checkCopies(t, after, 3)
	if a, b := fmt.Sprint(after.Assignments), fmt.Sprint(s.Assignments); a != b {
		t.Fatalf("a fourth member changed full assignments:\n%s\n%s", b, a)
	}
}

// With the replicas setting at 2, joiners share the new followers by load;
// raising the setting tops every partition up; lowering it removes none.
func TestFillSpreadsAndFollowsReplicas(t *testing.T) {
	f := NewFSM(nil)
	applyAll(t, f, addMember("n1"), Command{Op: OpSetSettings, Settings: map[string]string{"replicas": "2"}})
	for i := range 4 {
		applyAll(t, f, declareCmd(fmt.Sprint("q", i), appliance.Durable, 2, Policy{}))
	}
	applyAll(t, f, addMember("n2"), addMember("n3"))
	s := f.State()
	checkCopies(t, s, 2)
	// n2 joined alone and took every partition; n3 found them full.
	hosted := map[string]int{}
	for _, as := range s.Assignments {
		for _, a := range as {
			for _, fl := range a.Followers {
				hosted[fl]++
			}
		}
	}
	if hosted["n2"] != 8 || hosted["n3"] != 0 {
		t.Fatalf("followers per member %v, want n2 8, n3 0", hosted)
	}

	// A fresh cluster whose members all join before the setting rises
	// spreads the extra copies by load.
	g := NewFSM(nil)
	applyAll(t, g, addMember("n1"), Command{Op: OpSetSettings, Settings: map[string]string{"replicas": "1"}})
	for i := range 4 {
		applyAll(t, g, declareCmd(fmt.Sprint("q", i), appliance.Durable, 2, Policy{}))
	}
	applyAll(t, g, addMember("n2"), addMember("n3"))
	checkCopies(t, g.State(), 1)
	applyAll(t, g, Command{Op: OpSetSettings, Settings: map[string]string{"replicas": "2"}})
	s = g.State()
	checkCopies(t, s, 2)
	hosted = map[string]int{}
	for _, as := range s.Assignments {
		for _, a := range as {
			for _, fl := range a.Followers {
				hosted[fl]++
			}
		}
	}
	if hosted["n2"] != 4 || hosted["n3"] != 4 {
		t.Fatalf("followers per member %v, want 4 each", hosted)
	}
	if d := s.Assignments["q0"][0].Describe(s.Queues["q0"].Config.Durability); d != "durable on 2 of 2" {
		t.Fatalf("q0/0 reads %q", d)
	}

	applyAll(t, g, Command{Op: OpSetSettings, Settings: map[string]string{"replicas": "3"}})
	checkCopies(t, g.State(), 3)
	applyAll(t, g, Command{Op: OpSetSettings, Settings: map[string]string{"replicas": "1"}})
	checkCopies(t, g.State(), 3) // never removed here
}

// The same log gives the same state on every node, and a snapshot taken
// mid-way restores to a state that goes on identically.
func TestFillDeterministicAndSnapshot(t *testing.T) {
	log := []Command{addMember("n1")}
	for i := range 6 {
		log = append(log, declareCmd(fmt.Sprint("q", i), appliance.DurabilityUnspecified, 1+i%3, Policy{}))
	}
	log = append(log, addMember("n2"), declareCmd("late", appliance.Durable, 2, Policy{}), addMember("n3"),
		Command{Op: OpSetSettings, Settings: map[string]string{"replicas": "4"}})
	tail := []Command{addMember("n4"), addMember("n5")}

	a, b := NewFSM(nil), NewFSM(nil)
	applyAll(t, a, log...)
	applyAll(t, b, log...)
	if sa, sb := stateJSON(t, a.State()), stateJSON(t, b.State()); sa != sb {
		t.Fatalf("two nodes differ after the same log:\n%s\n%s", sa, sb)
	}
	checkCopies(t, a.State(), 3)

	snap, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	restored := NewFSM(nil)
	if err := restored.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if sa, sr := stateJSON(t, a.State()), stateJSON(t, restored.State()); sa != sr {
		t.Fatalf("restored state differs:\n%s\n%s", sa, sr)
	}
	applyAll(t, a, tail...)
	applyAll(t, restored, tail...)
	if sa, sr := stateJSON(t, a.State()), stateJSON(t, restored.State()); sa != sr {
		t.Fatalf("restored node diverges on the next commands:\n%s\n%s", sa, sr)
	}
	checkCopies(t, restored.State(), 4)
	for _, as := range restored.State().Assignments {
		for _, x := range as {
			if x.Epoch != 1 {
				t.Fatalf("epoch moved: %+v", x)
			}
		}
	}
}
