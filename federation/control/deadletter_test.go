package control

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/fibril-edge/fibril/appliance"
)

// A queue and its dead-letter queue share an owner: a dead-letter queue
// not declared yet is declared with the queue, on its owner, in its mode,
// with the default policy; a new queue naming a declared dead-letter queue
// is placed on that queue's owner; a queue elsewhere cannot take it.
func TestDeadLetterSharesTheOwner(t *testing.T) {
	f := NewFSM(nil)
	applyAll(t, f, addMember("n1"), addMember("n2"), addMember("n3"),
		Command{Op: OpDeclare, Queue: &appliance.QueueConfig{Name: "orders", Durability: appliance.Durable, DeadLetter: "rejects"}})
	s := f.State()
	dlq, ok := s.Queues["rejects"]
	if !ok {
		t.Fatal("the dead-letter queue was not declared with its queue")
	}
	if dlq.Config.Durability != appliance.Durable || dlq.Policy.String() != "majority_durable" || !dlq.DefaultPolicy {
		t.Fatalf("dead-letter queue declared as %+v", dlq)
	}
	owner := s.Assignments["orders"][0].Owner
	if got := s.Assignments["rejects"][0]; got.Owner != owner || len(got.Followers) != 2 || got.Incarnation != s.Queues["orders"].Incarnation {
		t.Fatalf("rejects placed %+v; orders is owned by %s", got, owner)
	}
	if dls := s.DeadLetterQueues(); !dls["rejects"] || dls["orders"] {
		t.Fatalf("dead-letter queues %v, want rejects only", dls)
	}

	// A second queue on the same dead-letter queue goes to its owner,
	// although that node already owns more than the others.
	applyAll(t, f, Command{Op: OpDeclare, Queue: &appliance.QueueConfig{Name: "audit", Durability: appliance.Durable, DeadLetter: "rejects"}})
	if got := f.State().Assignments["audit"][0].Owner; got != owner {
		t.Fatalf("audit placed on %s, its dead-letter queue's owner is %s", got, owner)
	}

	// A queue placed elsewhere cannot take it later.
	applyAll(t, f, declareCmd("metrics", appliance.Durable, 1, Policy{}))
	if other := f.State().Assignments["metrics"][0].Owner; other == owner {
		t.Fatalf("metrics placed on %s too; the test needs another owner", other)
	}
	b, err := json.Marshal(Command{Op: OpDeclare, Queue: &appliance.QueueConfig{Name: "metrics", DeadLetter: "rejects"}})
	if err != nil {
		t.Fatal(err)
	}
	if r := f.Apply(&raft.Log{Data: b}).(Result); !errors.Is(r.Err, appliance.ErrConflict) {
		t.Fatalf("metrics re-declared with another node's dead-letter queue: %v, want a conflict", r.Err)
	}
	if f.State().Queues["metrics"].Config.DeadLetter != "" {
		t.Fatal("the refused re-declare changed the queue")
	}
}
