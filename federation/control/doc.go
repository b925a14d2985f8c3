// Package control is the cluster's replicated state machine: members,
// queue declarations, assignments and cluster settings, changed only by
// commands applied in raft log order.
//
// # Purity
//
// State (state.go) and its transitions (apply in fsm.go, placement in
// place.go, policies in policy.go) do no I/O and read no clock: given the
// same commands in the same order every node computes the same state,
// including where each partition is placed. FSM wraps State for
// hashicorp/raft: raft calls Apply, Snapshot and Restore from its own
// goroutines; a read-write mutex guards the state against readers, which
// get a copy (FSM.State) or a read under the lock (FSM.Read).
//
// # Persisted formats
//
// Commands in the raft log and snapshots are JSON, with explicit field
// tags on every struct (Command, Member, Queue, Assignment, Policy, State,
// and appliance.QueueConfig inside a declare). testdata/golden holds a
// command of each kind and a snapshot as this version writes them; a test
// keeps later versions decoding them. A field may be added, never renamed.
//
//	command:  {"op": "declare", "queue": {QueueConfig}, "policy": {"kind": "replica_durable", "n": 2}, ...}
//	snapshot: {"members": {...}, "queues": {...}, "assignments": {...}, "settings": {...}, "applied": N}
//
// An undecodable command is applied as a failed command (its Result says
// why), never as a panic, so one bad entry cannot stop the state machine.
package control
