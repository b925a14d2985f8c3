package control

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"

	"github.com/hashicorp/raft"
)

// FuzzApplyCommand applies an arbitrary control-log entry to a state of
// three members with a few queues. An entry that does not decode, or that
// the state refuses, fails as a command and changes nothing; none panics,
// none changes the state published before it (the state is copied on
// write), and whatever is applied leaves a state whose every queue has one
// assignment per partition, each owned by a member, and which survives a
// snapshot and restore unchanged.
func FuzzApplyCommand(f *testing.F) {
	for _, c := range goldenCommands() {
		b, err := json.Marshal(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"op":"declare","queue":{"Name":"x","Partitions":300}}`))
	f.Add([]byte(`{"op":"set_settings","settings":{"replicas":"-1"}}`))
	f.Add([]byte(`{"op":"adopt","queue":{"Name":"solo","Durability":2,"Partitions":2},"owner":"n2"}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := NewFSM(nil)
		for i, c := range goldenCommands()[:7] { // members, settings, queues
			b, _ := json.Marshal(c)
			if r := fsm.Apply(&raft.Log{Index: uint64(i + 1), Data: b}).(Result); r.Err != nil {
				t.Fatalf("setup command %d: %v", i, r.Err)
			}
		}
		prev := fsm.Shared()
		before, _ := json.Marshal(prev)
		r := fsm.Apply(&raft.Log{Index: 100, Data: data}).(Result)
		if again, _ := json.Marshal(prev); string(again) != string(before) {
			t.Fatalf("applying a command changed the state published before it:\n%s\n%s", before, again)
		}
		st := fsm.State()
		if r.Err != nil {
			st.Applied = 7 // only the applied index moves on a failed command
			if after, _ := json.Marshal(st); string(after) != string(before) {
				t.Fatalf("a failed command (%v) changed the state:\n%s\n%s", r.Err, before, after)
			}
			return
		}
		if err := st.check(); err != nil {
			t.Fatalf("an applied command left a state that fails its check: %v", err)
		}
		for name, q := range st.Queues {
			as := st.Assignments[name]
			if len(as) != q.Config.Partitions {
				t.Fatalf("queue %s: %d partitions, %d assignments", name, q.Config.Partitions, len(as))
			}
			for _, a := range as {
				if _, ok := st.Members[a.Owner]; !ok {
					t.Fatalf("queue %s partition %d owned by %q, not a member", name, a.Partition, a.Owner)
				}
			}
		}
		snap, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		restored := NewFSM(nil)
		if err := restored.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
			t.Fatalf("restore: %v", err)
		}
		if again, _ := json.Marshal(restored.State()); string(again) != string(snap) {
			t.Fatalf("snapshot does not survive a restore:\n%s\n%s", snap, again)
		}
	})
}

// FuzzRestoreSnapshot restores arbitrary bytes as a snapshot from the
// leader: they are refused, or they leave a state that passes its check,
// takes a command and survives another snapshot and restore unchanged.
func FuzzRestoreSnapshot(f *testing.F) {
	fsm := NewFSM(nil)
	for i, c := range goldenCommands() {
		b, _ := json.Marshal(c)
		fsm.Apply(&raft.Log{Index: uint64(i + 1), Data: b})
	}
	good, err := json.Marshal(fsm.State())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"members":null,"queues":{"q":{"config":{"Name":"q","Partitions":2}}}}`))
	f.Add([]byte(`{"assignments":{"q":[{"queue":"q","partition":0,"owner":"ghost"}]}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := NewFSM(nil)
		if err := fsm.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
			if len(fsm.State().Queues) != 0 || len(fsm.State().Members) != 0 {
				t.Fatalf("a refused snapshot (%v) changed the state", err)
			}
			return
		}
		st := fsm.State()
		if err := st.check(); err != nil {
			t.Fatalf("a restored state fails its check: %v", err)
		}
		for i, c := range goldenCommands() {
			b, _ := json.Marshal(c)
			fsm.Apply(&raft.Log{Index: st.Applied + uint64(i) + 1, Data: b}) // refused or applied; never a panic
		}
		snap, err := json.Marshal(fsm.State())
		if err != nil {
			t.Fatal(err)
		}
		again := NewFSM(nil)
		if err := again.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
			t.Fatalf("the state's own snapshot is refused: %v", err)
		}
		if back, _ := json.Marshal(again.State()); !bytes.Equal(back, snap) {
			t.Fatalf("a snapshot and restore changed the state:\n%s\n%s", snap, back)
		}
	})
}
