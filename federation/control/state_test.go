package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/fibril-edge/fibril/appliance"
)

func threeMembers(t *testing.T) *State {
	t.Helper()
	s := newState()
	for _, id := range []string{"n1", "n2", "n3"} {
		if err := s.addMember(Member{ID: id, ClusterAddr: id + ":7000", Voter: true}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func TestParsePolicy(t *testing.T) {
	for in, want := range map[string]Policy{
		"replica_durable:2":  {Kind: ReplicaDurable, N: 2},
		"majority_durable":   {Kind: MajorityDurable},
		"replica_buffered:3": {Kind: ReplicaBuffered, N: 3},
		"replica_accepted:2": {Kind: ReplicaDurable, N: 2},
		"":                   {},
	} {
		got, warn, err := ParsePolicy(in)
		if err != nil || got != want {
			t.Errorf("ParsePolicy(%q) = %v, %v; want %v", in, got, err, want)
		}
		if (in == "replica_accepted:2") != (warn != "") {
			t.Errorf("ParsePolicy(%q) warning %q", in, warn)
		}
		if !got.IsZero() && got.String() != in && in != "replica_accepted:2" {
			t.Errorf("String() = %q, want %q", got.String(), in)
		}
	}
	for _, bad := range []string{"replica_durable", "replica_durable:0", "replica_durable:x", "majority_durable:2", "quorum", "replica_buffered:99"} {
		if _, _, err := ParsePolicy(bad); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("ParsePolicy(%q) = %v, want ErrInvalidPolicy", bad, err)
		}
	}
	p := Policy{Kind: ReplicaBuffered, N: 2}
	if d := p.Describe(appliance.Buffered, 3); d != "written on 2 of 3" {
		t.Errorf("Describe = %q", d)
	}
	if d := (Policy{Kind: MajorityDurable}).Describe(appliance.Durable, 3); d != "durable on 2 of 3" {
		t.Errorf("Describe = %q", d)
	}
}

func TestDeclareRules(t *testing.T) {
	s := threeMembers(t)
	// No mode, no policy: the default stays durable, on a majority.
	q, created, err := s.declare(appliance.QueueConfig{Name: "plain"}, Policy{}, nil)
	if err != nil || !created {
		t.Fatal(created, err)
	}
	if q.Config.Durability != appliance.Durable || q.Policy != (Policy{Kind: MajorityDurable}) || len(q.Warnings) != 0 {
		t.Fatalf("default declare: %+v", q)
	}
	// Buffered without a policy: replica_buffered on a majority.
	q, _, err = s.declare(appliance.QueueConfig{Name: "readings", Durability: appliance.Buffered}, Policy{}, nil)
	if err != nil || q.Policy != (Policy{Kind: ReplicaBuffered, N: 2}) || len(q.Warnings) == 0 {
		t.Fatalf("buffered declare: %+v %v", q, err)
	}
	// Durable without a policy: majority_durable.
	q, _, err = s.declare(appliance.QueueConfig{Name: "orders", Durability: appliance.Durable, Partitions: 3}, Policy{}, nil)
	if err != nil || q.Policy.Kind != MajorityDurable {
		t.Fatal(q, err)
	}
	// Re-declaring the other mode is a mode conflict; no mode keeps it.
	if _, _, err := s.declare(appliance.QueueConfig{Name: "orders", Durability: appliance.Buffered}, Policy{}, nil); !errors.Is(err, appliance.ErrModeConflict) {
		t.Fatalf("mode switch: %v", err)
	}
	if q, created, err := s.declare(appliance.QueueConfig{Name: "orders"}, Policy{}, nil); err != nil || created || q.Config.Durability != appliance.Durable {
		t.Fatalf("re-declare without mode: %+v %v %v", q, created, err)
	}
	// The mode and the count stay separate: replica_durable:2 on a
	// buffered queue counts written copies; replica_buffered names a mode
	// and cannot go with a durable queue.
	q, _, err = s.declare(appliance.QueueConfig{Name: "x", Durability: appliance.Buffered}, Policy{Kind: ReplicaDurable, N: 2}, nil)
	if err != nil || q.Config.Durability != appliance.Buffered {
		t.Fatalf("replica_durable:2 on a buffered queue: %+v %v", q, err)
	}
	if d := s.Assignments["x"][0].Describe(q.Config.Durability); d != "written on 2 of 3" {
		t.Fatalf("replica_durable:2 on a buffered queue reads %q", d)
	}
	if _, _, err := s.declare(appliance.QueueConfig{Name: "x2", Durability: appliance.Durable}, Policy{Kind: ReplicaBuffered, N: 2}, nil); !errors.Is(err, appliance.ErrInvalid) {
		t.Fatalf("replica_buffered on a durable queue: %v", err)
	}
	if q, _, err := s.declare(appliance.QueueConfig{Name: "y"}, Policy{Kind: ReplicaDurable, N: 3}, nil); err != nil || q.Config.Durability != appliance.Durable {
		t.Fatalf("policy implies durable: %+v %v", q, err)
	}
	if _, _, err := s.declare(appliance.QueueConfig{Name: "y"}, Policy{Kind: ReplicaDurable, N: 2}, nil); !errors.Is(err, appliance.ErrConflict) {
		t.Fatalf("policy change: %v", err)
	}
	if _, _, err := s.declare(appliance.QueueConfig{Name: "z"}, Policy{Kind: ReplicaDurable, N: 4}, nil); !errors.Is(err, ErrNotEnoughMembers) {
		t.Fatalf("4 copies on 3 members: %v", err)
	}
	if _, _, err := s.declare(appliance.QueueConfig{Name: "bad name"}, Policy{}, nil); !errors.Is(err, appliance.ErrInvalid) {
		t.Fatalf("bad name: %v", err)
	}
}

// Placement spreads owners evenly over queues (a queue's partitions share
// an owner), never puts two copies of a partition on one member, and is
// the same on every node.
func TestPlacementSpreads(t *testing.T) {
	s := threeMembers(t)
	for i := range 6 {
		if _, _, err := s.declare(appliance.QueueConfig{Name: fmt.Sprint("q", i), Partitions: 1 + i%2}, Policy{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	owners := map[string]int{}
	for name, as := range s.Assignments {
		for _, a := range as {
			if a.Owner != as[0].Owner {
				t.Fatalf("%s has two owners: %+v", name, as)
			}
			seen := map[string]bool{a.Owner: true}
			for _, f := range a.Followers {
				if seen[f] {
					t.Fatalf("%s/%d has two copies on %s: %+v", name, a.Partition, f, a)
				}
				seen[f] = true
			}
			if a.Replicas() != 3 || a.Epoch != 1 {
				t.Fatalf("assignment %+v", a)
			}
		}
		owners[as[0].Owner]++
	}
	for id, n := range owners {
		if n != 2 {
			t.Fatalf("queues owned %v (%s owns %d), want 2 each", owners, id, n)
		}
	}
	again := threeMembers(t)
	for i := range 6 {
		again.declare(appliance.QueueConfig{Name: fmt.Sprint("q", i), Partitions: 1 + i%2}, Policy{}, nil)
	}
	for name, as := range again.Assignments {
		for i, a := range as {
			b := s.Assignments[name][i]
			if a.Owner != b.Owner || fmt.Sprint(a.Followers) != fmt.Sprint(b.Followers) {
				t.Fatalf("placement differs between runs at %s/%d: %+v vs %+v", name, i, a, b)
			}
		}
	}
}

type memSink struct{ bytes.Buffer }

func (*memSink) ID() string    { return "mem" }
func (*memSink) Cancel() error { return nil }
func (*memSink) Close() error  { return nil }

func TestSnapshotRestore(t *testing.T) {
	f := NewFSM(nil)
	st := threeMembers(t)
	st.declare(appliance.QueueConfig{Name: "q", Partitions: 2}, Policy{}, nil)
	st.setSettings(map[string]string{"replicas": "3"})
	f.state.Store(st)
	g := roundTrip(t, f)
	got := g.State()
	if len(got.Members) != 3 || got.Queues["q"].Config.Partitions != 2 || len(got.Assignments["q"]) != 2 || got.Settings["replicas"] != "3" {
		t.Fatalf("restored %+v", got)
	}
	r := g.Apply(&raft.Log{Data: []byte(`{"op":"set_settings","settings":{"replicas":"9"}}`)}).(Result)
	if !errors.Is(r.Err, appliance.ErrInvalid) {
		t.Fatalf("replicas 9: %v", r.Err)
	}
	r = g.Apply(&raft.Log{Data: []byte(`{"op":"set_settings","settings":{"colour":"red"}}`)}).(Result)
	if !errors.Is(r.Err, ErrUnknownSetting) {
		t.Fatalf("unknown setting: %v", r.Err)
	}
	if r := g.Apply(&raft.Log{Data: []byte(`{"op":"remove_member","id":"n1"}`)}).(Result); !errors.Is(r.Err, appliance.ErrConflict) {
		t.Fatalf("removing a member that hosts replicas: %v", r.Err)
	}
}

// The owner lookup of every forwarded publish: a copy of the state
// (State) against a read of the published state (Read), with 100 queues.
func BenchmarkOwnerLookup(b *testing.B) {
	f, st := NewFSM(nil), newState()
	for _, id := range []string{"n1", "n2", "n3"} {
		st.addMember(Member{ID: id, ClusterAddr: id + ":7000"})
	}
	for i := range 100 {
		st.declare(appliance.QueueConfig{Name: fmt.Sprint("q", i), Partitions: 2}, Policy{}, nil)
	}
	f.state.Store(st)
	b.Run("copy", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = f.State().Assignments["q50"][0].Owner
		}
	})
	b.Run("read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			f.Read(func(s *State) { _ = s.Assignments["q50"][0].Owner })
		}
	})
}

// A queue's incarnation is the raft index of the declare that created it:
// a repeated declare keeps it, a queue deleted and declared again gets a
// new one, every partition's assignment carries it, and the state's
// Applied index survives a snapshot.
func TestIncarnation(t *testing.T) {
	f := NewFSM(nil)
	index := uint64(0)
	apply := func(c Command) Result {
		t.Helper()
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		index += 3 // not every raft entry is a command
		return f.Apply(&raft.Log{Index: index, Data: b}).(Result)
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		apply(addMember(id))
	}
	if r := apply(declareCmd("q", appliance.Buffered, 2, Policy{})); r.Err != nil || r.Queue.Incarnation != 12 {
		t.Fatalf("declare: %+v", r)
	}
	if r := apply(declareCmd("q", appliance.Buffered, 2, Policy{})); r.Err != nil || r.Created || r.Queue.Incarnation != 12 {
		t.Fatalf("declare again: %+v", r)
	}
	s := f.State()
	for _, a := range s.Assignments["q"] {
		if a.Incarnation != 12 || !s.Follows(a.Followers[0], "q", 12, a.Partition) || s.Follows(a.Owner, "q", 12, a.Partition) {
			t.Fatalf("assignment %+v", a)
		}
	}
	follower := s.Assignments["q"][1].Followers[0]
	if r := apply(Command{Op: OpDeleteQueue, ID: "q"}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if s := f.State(); s.Follows(follower, "q", 12, 1) || s.Applied != 18 {
		t.Fatalf("after delete: follows, applied %d", s.Applied)
	}
	if r := apply(Command{Op: OpDeleteQueue, ID: "q"}); !errors.Is(r.Err, ErrUnknownQueue) || f.Applied() != 21 {
		t.Fatalf("delete again: %v, applied %d", r.Err, f.Applied())
	}
	if r := apply(declareCmd("q", appliance.Durable, 1, Policy{})); r.Err != nil || r.Queue.Incarnation != 24 {
		t.Fatalf("declare after delete: %+v", r)
	}
	if s := f.State(); s.Follows(follower, "q", 12, 0) || s.Assignments["q"][0].Incarnation != 24 {
		t.Fatalf("re-declared: %+v", s.Assignments["q"])
	}
	g := roundTrip(t, f)
	if s := g.State(); g.Applied() != 24 || s.Queues["q"].Incarnation != 24 || s.Assignments["q"][0].Incarnation != 24 {
		t.Fatalf("restored: applied %d, %+v", g.Applied(), s.Assignments["q"])
	}

	// A recovery or a seal report meant for the first declaration, late
	// or retried, leaves the second alone.
	if r := apply(Command{Op: OpRecover, Recover: &Recover{Queue: "q", Incarnation: 12, Epoch: 1}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if a := f.State().Assignments["q"][0]; a.Sealing || a.Epoch != 1 {
		t.Fatalf("a recovery of the first declaration started one of the second: %+v", a)
	}
	if r := apply(Command{Op: OpRecover, Recover: &Recover{Queue: "q", Incarnation: 24, Epoch: 1}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	a := f.State().Assignments["q"][0]
	if !a.Sealing || a.Epoch != 2 {
		t.Fatalf("the second declaration's recovery did not start: %+v", a)
	}
	if r := apply(Command{Op: OpSeal, Seal: &SealReport{Queue: "q", Incarnation: 12, Epoch: 2, Node: a.Owner,
		Seals: []Seal{{End: 20, LastEpoch: 1, Witness: true, Acked: 20}, {End: 20, LastEpoch: 1, Witness: true, Acked: 20}}}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if a := f.State().Assignments["q"][0]; len(a.Seals) != 0 {
		t.Fatalf("the first declaration's seals were counted for the second: %+v", a.Seals)
	}
}

// A cluster default_policy decides the mode and count of a queue declared
// without either; a declare naming a mode wins, keeping the count.
func TestClusterDefaultPolicy(t *testing.T) {
	s := threeMembers(t)
	if err := s.setSettings(map[string]string{"default_policy": "replica_buffered:2"}); err != nil {
		t.Fatal(err)
	}
	q, _, err := s.declare(appliance.QueueConfig{Name: "plain"}, Policy{}, nil)
	if err != nil || q.Config.Durability != appliance.Buffered || q.Policy != (Policy{Kind: ReplicaBuffered, N: 2}) {
		t.Fatalf("with the cluster default: %+v %v", q, err)
	}
	q, _, err = s.declare(appliance.QueueConfig{Name: "orders", Durability: appliance.Durable}, Policy{}, nil)
	if err != nil || q.Config.Durability != appliance.Durable || q.Policy != (Policy{Kind: ReplicaDurable, N: 2}) {
		t.Fatalf("durable declare under a buffered cluster default: %+v %v", q, err)
	}
	if d := s.Assignments["orders"][0].Describe(q.Config.Durability); d != "durable on 2 of 3" {
		t.Fatalf("reads %q", d)
	}
	if err := s.setSettings(map[string]string{"default_policy": "quorum"}); !errors.Is(err, appliance.ErrInvalid) {
		t.Fatalf("a bad default_policy: %v", err)
	}
	if err := s.setSettings(map[string]string{"default_policy": ""}); err != nil {
		t.Fatal(err)
	}
	if q, _, err := s.declare(appliance.QueueConfig{Name: "later"}, Policy{}, nil); err != nil || q.Config.Durability != appliance.Durable {
		t.Fatalf("with the default cleared: %+v %v", q, err)
	}
}

// roundTrip persists f's snapshot and restores it into a new FSM.
func roundTrip(t *testing.T, f *FSM) *FSM {
	t.Helper()
	snap, _ := f.Snapshot()
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	g := NewFSM(nil)
	if err := g.Restore(io.NopCloser(&sink)); err != nil {
		t.Fatal(err)
	}
	return g
}

// A node joining with its data keeps owning the queues it brings; a name
// the cluster already has is a conflict, and the same adoption applied
// again (a retry after a crash) is not.
func TestAdoptKeepsTheOwnerAndRefusesClashes(t *testing.T) {
	s := threeMembers(t)
	// n3 owns the fewest partitions after this, so placement alone would
	// not pick n1 for the next queue.
	if _, _, err := s.declare(appliance.QueueConfig{Name: "busy", Durability: appliance.Durable, Partitions: 3}, Policy{}, nil); err != nil {
		t.Fatal(err)
	}
	busy := s.Assignments["busy"][0].Owner
	cfg := appliance.QueueConfig{Name: "sensors", Durability: appliance.Buffered, Partitions: 2}
	q, created, err := s.adopt(cfg, busy)
	if err != nil || !created {
		t.Fatalf("adopt: %v (created %v)", err, created)
	}
	if q.AdoptedFrom != busy || q.Config.Durability != appliance.Buffered {
		t.Fatalf("adopted %+v", q)
	}
	for _, a := range s.Assignments["sensors"] {
		if a.Owner != busy || a.Epoch != 1 || len(a.Followers) != 2 {
			t.Fatalf("adopted queue placed %+v, want owned by %s at epoch 1 with two followers", a, busy)
		}
	}
	if _, created, err := s.adopt(cfg, busy); err != nil || created {
		t.Fatalf("the same adoption again: %v (created %v), want the queue as it is", err, created)
	}
	for _, clash := range []struct {
		cfg   appliance.QueueConfig
		owner string
	}{
		{appliance.QueueConfig{Name: "sensors", Durability: appliance.Durable, Partitions: 2}, busy},
		{cfg, "n9"},
		{appliance.QueueConfig{Name: "busy", Durability: appliance.Durable, Partitions: 3}, busy},
	} {
		if _, _, err := s.adopt(clash.cfg, clash.owner); err == nil {
			t.Errorf("adopt %+v by %s: no error", clash.cfg, clash.owner)
		}
	}
	other := "n1"
	if busy == "n1" {
		other = "n2"
	}
	if _, _, err := s.adopt(cfg, other); !errors.Is(err, appliance.ErrConflict) {
		t.Errorf("another node adopting the same name: %v, want ErrConflict", err)
	}
}

// Shared hands every caller the same copy until a command is applied or a
// snapshot restored, and that copy is the state as it stood: a command
// applied later shows only in the next one.
func TestSharedIsOneCopyPerChange(t *testing.T) {
	f := NewFSM(nil)
	applyAll(t, f, addMember("n1"), declareCmd("first", appliance.Durable, 1, Policy{}))
	s := f.Shared()
	if again := f.Shared(); again != s {
		t.Fatal("two calls without a change in between made two copies")
	}
	if _, ok := s.Queues["first"]; !ok {
		t.Fatal("the shared state lacks the declared queue")
	}
	applyAll(t, f, declareCmd("second", appliance.Durable, 1, Policy{}))
	if _, ok := s.Queues["second"]; ok {
		t.Fatal("a command applied after the copy changed it")
	}
	next := f.Shared()
	if next == s || !reflect.DeepEqual(next, f.State()) {
		t.Fatalf("after a command, Shared is %+v, want a new copy equal to %+v", next, f.State())
	}
	var snap bytes.Buffer
	if err := json.NewEncoder(&snap).Encode(NewFSM(nil).State()); err != nil {
		t.Fatal(err)
	}
	if err := f.Restore(io.NopCloser(&snap)); err != nil {
		t.Fatal(err)
	}
	if got := f.Shared(); len(got.Queues) != 0 {
		t.Fatalf("after restoring an empty snapshot, Shared still has %d queues", len(got.Queues))
	}
}

// OwnedBy names the node that serves a queue: its assignment's owner,
// and no one while a recovery seals it.
func TestOwnedBy(t *testing.T) {
	s := &State{Assignments: map[string][]Assignment{
		"q":      {{Queue: "q", Owner: "n1", Followers: []string{"n2"}}},
		"sealed": {{Queue: "sealed", Owner: "n1", Sealing: true}},
	}}
	for _, c := range []struct {
		queue, id string
		want      bool
	}{
		{"q", "n1", true},
		{"q", "n2", false}, // a follower
		{"sealed", "n1", false},
		{"unknown", "n1", false},
	} {
		if got := s.OwnedBy(c.queue, c.id); got != c.want {
			t.Errorf("OwnedBy(%q, %q) = %v, want %v", c.queue, c.id, got, c.want)
		}
	}
}
