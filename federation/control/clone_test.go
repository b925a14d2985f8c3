package control

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/fibril-edge/fibril/appliance"
)

// stateWithQueues is the state of three members and n single-partition
// queues.
func stateWithQueues(tb testing.TB, n int) *FSM {
	tb.Helper()
	f := NewFSM(nil)
	cmds := []Command{addMember("n1"), addMember("n2"), addMember("n3")}
	for i := range n {
		cmds = append(cmds, declareCmd(fmt.Sprintf("q-%d", i), appliance.Buffered, 1+i%3, Policy{}))
	}
	for i, c := range cmds {
		b, err := json.Marshal(c)
		if err != nil {
			tb.Fatal(err)
		}
		if r := f.Apply(&raft.Log{Index: uint64(i + 1), Data: b}).(Result); r.Err != nil {
			tb.Fatalf("command %d: %v", i, r.Err)
		}
	}
	return f
}

// A clone equals its state and shares nothing a change to it could reach:
// the follower lists and assignments cut from shared arrays included.
func TestCloneIsDeep(t *testing.T) {
	st := stateWithQueues(t, 20).State()
	st.Queues["q-1"] = func(q Queue) Queue { q.Warnings = []string{"w"}; return q }(st.Queues["q-1"])
	c := st.clone()
	if !reflect.DeepEqual(c, st) {
		t.Fatalf("clone differs:\n%+v\nwant\n%+v", c, st)
	}
	want := st.clone()
	for name, as := range c.Assignments {
		for i := range as {
			as[i].Followers[0] = "changed"
			as[i].Followers = append(as[i].Followers, "appended")
			as[i].Owner = "changed"
		}
		c.Assignments[name] = append(as, Assignment{Owner: "appended"})
	}
	c.Queues["q-1"].Warnings[0] = "changed"
	if !reflect.DeepEqual(st, want) {
		t.Fatal("changing the clone changed the state")
	}
}

// BenchmarkStateClone copies the state of a three-node cluster with 1,000
// queues: what a caller of FSM.State pays, and what the loops that read
// the whole state paid once per applied command before the state was
// copied on write.
func BenchmarkStateClone(b *testing.B) {
	f := stateWithQueues(b, 1000)
	b.ReportAllocs()
	for b.Loop() {
		_ = f.State()
	}
}

// BenchmarkDeclareThousand declares 1,000 queues on three members, one
// command at a time, and reads the shared state after each as the
// node's loops do: what declaring a thousand queues costs a node's
// control state.
func BenchmarkDeclareThousand(b *testing.B) {
	cmds := [][]byte{}
	for _, c := range []Command{addMember("n1"), addMember("n2"), addMember("n3")} {
		bs, _ := json.Marshal(c)
		cmds = append(cmds, bs)
	}
	for i := range 1000 {
		bs, _ := json.Marshal(declareCmd(fmt.Sprintf("q-%d", i), appliance.Buffered, 1, Policy{}))
		cmds = append(cmds, bs)
	}
	b.ReportAllocs()
	for b.Loop() {
		f := NewFSM(nil)
		for i, c := range cmds {
			if r := f.Apply(&raft.Log{Index: uint64(i + 1), Data: c}).(Result); r.Err != nil {
				b.Fatal(r.Err)
			}
			_ = f.Shared()
		}
	}
}

// A published state never changes: every command, from a member joining
// (fill adds followers) to a recovery's seals (which change assignments
// in place once owned), leaves the states published before it as they
// were, while a reader reads them without a lock.
func TestPublishedStatesNeverChange(t *testing.T) {
	cmds := []Command{addMember("n1"), addMember("n2"),
		declareCmd("q", appliance.Buffered, 2, Policy{}),
		{Op: OpSetMode, Mode: &SetMode{Queue: "q", To: appliance.Durable, Since: 1}},
		{Op: OpSetMode, Mode: &SetMode{Queue: "q", To: appliance.Durable, Applied: true}},
		addMember("n3"), // fill: q's partitions gain a follower
		{Op: OpSetSettings, Settings: map[string]string{"replicas": "3"}},
		declareCmd("other", appliance.Buffered, 1, Policy{}),
		{Op: OpAdopt, Queue: &appliance.QueueConfig{Name: "brought", Durability: appliance.Buffered, Partitions: 1}, Owner: "n2"},
	}
	f := NewFSM(nil)
	type published struct {
		st   *State
		json string
	}
	var seen []published
	apply := func(c Command) Result {
		t.Helper()
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		r := f.Apply(&raft.Log{Index: f.Applied() + 1, Data: b}).(Result)
		st := f.Shared()
		j, _ := json.Marshal(st)
		seen = append(seen, published{st, string(j)})
		return r
	}
	stop := make(chan struct{})
	readerDone := make(chan struct{})
	go func() { // a reader the race detector watches against Apply
		defer close(readerDone)
		for {
			select {
			case <-stop:
				return
			default:
				_, _ = json.Marshal(f.Shared())
			}
		}
	}()
	for i, c := range cmds {
		if r := apply(c); r.Err != nil {
			t.Fatalf("command %d (%s): %v", i, c.Op, r.Err)
		}
	}
	as := f.Shared().Assignments["q"]
	if len(as) != 2 || as[0].Replicas() != 3 {
		t.Fatalf("q after n3 joined: %+v", as)
	}
	old, epoch, copies := as[0].Owner, as[0].Epoch, as[0].Copies()
	apply(Command{Op: OpRecover, Recover: &Recover{Queue: "q", Epoch: epoch, Reason: "test", At: 1}})
	for i, n := range copies {
		end := uint64(10 + i)
		seal := Seal{End: end, LastEpoch: epoch, Witness: true, Cut: n == old}
		apply(Command{Op: OpSeal, Seal: &SealReport{Queue: "q", Epoch: epoch + 1, Node: n, Seals: []Seal{seal, seal}}})
	}
	if a := f.Shared().Assignments["q"][0]; a.Sealing || a.Epoch != epoch+1 {
		t.Fatalf("q after the seals: %+v", a)
	}
	apply(Command{Op: OpDeleteQueue, ID: "other"})
	apply(Command{Op: OpSeal, Seal: &SealReport{Queue: "gone"}}) // refused: changes nothing but Applied
	close(stop)
	<-readerDone
	for i, p := range seen {
		if j, _ := json.Marshal(p.st); string(j) != p.json {
			t.Errorf("the state published after command %d changed since:\n%s\nnow\n%s", i, p.json, j)
		}
	}
}
