package federation

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/fibril-edge/fibril/federation/control"
)

// FuzzControlRequest reads arbitrary bytes as a control request from a
// peer whose certificate names n2, a member only in the second run: a
// request is refused or decodes to one that encodes and decodes again the
// same; a non-member never joins as another node, nobody brings queues
// along or reports seals for another node, and nobody changes the member
// list but through a join.
func FuzzControlRequest(f *testing.F) {
	for _, r := range []controlRequest{
		{Join: &control.Member{ID: "n2", ClusterAddr: "127.0.0.1:1"}},
		{Join: &control.Member{ID: "n9", ClusterAddr: "127.0.0.1:1"}},
		{Command: &control.Command{Op: control.OpAdopt, Owner: "n3"}},
		{Command: &control.Command{Op: control.OpDeleteQueue, ID: "q"}},
		{Command: &control.Command{Op: control.OpAddMember, Member: &control.Member{ID: "n3", ClientAddr: "127.0.0.1:6666"}}},
		{Command: &control.Command{Op: control.OpRemoveMember, ID: "n3"}},
		{Command: &control.Command{Op: control.OpSeal, Seal: &control.SealReport{Queue: "q", Node: "n3"}}},
		{Command: &control.Command{Op: control.OpSeal, Seal: &control.SealReport{Queue: "q", Node: "n2"}}},
		{Ping: true},
	} {
		b, err := json.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"join":{"id":"n2"},"command":{"op":"adopt","owner":"n2"}}`))
	f.Add(bytes.Repeat([]byte("["), 1<<12))
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := readControlRequest(bytes.NewReader(data))
		if err != nil {
			return
		}
		b, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("a decoded request does not encode: %v", err)
		}
		again, err := readControlRequest(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("a request's own encoding is refused: %v", err)
		}
		if b2, _ := json.Marshal(again); !bytes.Equal(b, b2) {
			t.Fatalf("a request changed through encoding:\n%s\n%s", b, b2)
		}
		for _, member := range []bool{false, true} {
			err := refuseControl(req, "n2", func(id string) bool { return member && id == "n2" })
			joinsAsOther := req.Join != nil && req.Join.ID != "n2" && !member
			cmd := req.Command
			adoptsForOther := cmd != nil && cmd.Op == control.OpAdopt && cmd.Owner != "n2"
			changesMembers := cmd != nil && (cmd.Op == control.OpAddMember || cmd.Op == control.OpRemoveMember)
			sealsForOther := cmd != nil && cmd.Op == control.OpSeal && (cmd.Seal == nil || cmd.Seal.Node != "n2")
			if (err != nil) != (joinsAsOther || adoptsForOther || changesMembers || sealsForOther) {
				t.Fatalf("member %v: request %s: refused %v; joins as another %v, adopts for another %v, changes members %v, seals for another %v",
					member, b, err, joinsAsOther, adoptsForOther, changesMembers, sealsForOther)
			}
		}
	})
}
