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
	f := stateWithQueues(t, 20)
	f.state.Queues["q-1"] = func(q Queue) Queue { q.Warnings = []string{"w"}; return q }(f.state.Queues["q-1"])
	c := f.state.clone()
	if !reflect.DeepEqual(c, f.state) {
		t.Fatalf("clone differs:\n%+v\nwant\n%+v", c, f.state)
	}
	want := f.state.clone()
	for name, as := range c.Assignments {
		for i := range as {
			as[i].Followers[0] = "changed"
			as[i].Followers = append(as[i].Followers, "appended")
			as[i].Owner = "changed"
		}
		c.Assignments[name] = append(as, Assignment{Owner: "appended"})
	}
	c.Queues["q-1"].Warnings[0] = "changed"
	if !reflect.DeepEqual(f.state, want) {
		t.Fatal("changing the clone changed the state")
	}
}

// BenchmarkStateClone copies the state of a three-node cluster with 1,000
// queues: what the loops that read the whole state pay once per applied
// command (FSM.Shared).
func BenchmarkStateClone(b *testing.B) {
	f := stateWithQueues(b, 1000)
	b.ReportAllocs()
	for b.Loop() {
		_ = f.state.clone()
	}
}
