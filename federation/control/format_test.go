package control

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fibril-edge/fibril/appliance"
)

// The golden files under testdata/golden hold the control log's commands
// and a state snapshot as this version writes them. Every later version
// must decode them to the same values and write the same bytes for the
// same values; replaying the commands must build the snapshot's state.
// `go test -run TestPersistedFormats -update` rewrites them; do that only
// with a migration for the clusters already out there.
var update = flag.Bool("update", false, "rewrite the golden files of persisted formats")

func goldenCommands() []Command {
	member := func(id string) *Member {
		return &Member{ID: id, ClusterAddr: id + ":7422", ClientAddr: id + ":7420", Voter: true}
	}
	return []Command{
		{Op: OpAddMember, Member: member("n1")},
		{Op: OpAddMember, Member: member("n2")},
		{Op: OpAddMember, Member: member("n3")},
		{Op: OpSetSettings, Settings: map[string]string{"replicas": "3"}},
		{Op: OpDeclare, Queue: &appliance.QueueConfig{Name: "orders", Durability: appliance.Durable, Partitions: 2,
			DeadLetter: "orders-dlq", MaxDeliveries: 5, AckDeadline: 30 * time.Second, DedupeWindow: time.Minute},
			Policy: Policy{Kind: ReplicaDurable, N: 2}},
		{Op: OpDeclare, Queue: &appliance.QueueConfig{Name: "clicks", Durability: appliance.Buffered},
			Policy: Policy{Kind: ReplicaBuffered, N: 3}},
		{Op: OpDeclare, Queue: &appliance.QueueConfig{Name: "legacy", Durability: appliance.Durable},
			Policy: Policy{Kind: ReplicaDurable, N: 2}, Warnings: []string{ReplicaAcceptedWarning}},
		{Op: OpDeclare, Queue: &appliance.QueueConfig{Name: "scratch"}},
		{Op: OpDeleteQueue, ID: "scratch"},
		{Op: OpAddMember, Member: member("n4")}, // every partition already has its three copies
		{Op: OpRemoveMember, ID: "n4"},
	}
}

func TestPersistedFormats(t *testing.T) {
	cmds := goldenCommands()
	var log bytes.Buffer
	for _, c := range cmds {
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		log.Write(append(b, '\n'))
	}
	checkGolden(t, "commands.jsonl", log.Bytes())

	// Each golden command decodes to its value, and the log replays.
	fsm := NewFSM(nil)
	for i, line := range bytes.Split(bytes.TrimSuffix(readGolden(t, "commands.jsonl"), []byte("\n")), []byte("\n")) {
		var c Command
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
		if !reflect.DeepEqual(c, cmds[i]) {
			t.Errorf("command %d decodes to %+v, want %+v", i, c, cmds[i])
		}
		if r := fsm.Apply(&raft.Log{Index: uint64(i + 1), Data: line}).(Result); r.Err != nil {
			t.Fatalf("command %d (%s): %v", i, c.Op, r.Err)
		}
	}
	var snap bytes.Buffer
	if err := json.NewEncoder(&snap).Encode(fsm.State()); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "snapshot.json", snap.Bytes())

	// The golden snapshot restores to the state the commands built.
	restored := NewFSM(nil)
	if err := restored.Restore(io.NopCloser(bytes.NewReader(readGolden(t, "snapshot.json")))); err != nil {
		t.Fatal(err)
	}
	if got, want := restored.State(), fsm.State(); !reflect.DeepEqual(got, want) {
		t.Errorf("golden snapshot restores to\n%+v\nwant\n%+v", got, want)
	}
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if golden := readGolden(t, name); !bytes.Equal(got, golden) {
		t.Errorf("this version writes\n%s\nwhere %s holds\n%s", got, path, golden)
	}
}

func readGolden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "golden", name))
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	return b
}
