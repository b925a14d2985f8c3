package daemon

import "testing"

// The built-in config passes its own check, and Check agrees with Parse
// and Validate on it.
func TestCheckDefault(t *testing.T) {
	if problems := Check(DefaultTOML()); len(problems) != 0 {
		t.Fatalf("default.toml: %v", problems)
	}
}

func TestCheckReportsEveryProblemWithItsLine(t *testing.T) {
	text := "[server]\nlisten = 5\nheartbeat = \"2h\"\nbogus = 1\n[storage]\ndata_dir = \"\"\n"
	want := []Problem{
		{Line: 2, Key: "server.listen"},
		{Line: 3, Key: "server.heartbeat"},
		{Line: 4, Key: "server.bogus"},
		{Line: 6, Key: "storage.data_dir"},
	}
	got := Check([]byte(text))
	if len(got) != len(want) {
		t.Fatalf("got %v, want %d problems", got, len(want))
	}
	for i := range want {
		if got[i].Line != want[i].Line || got[i].Key != want[i].Key || got[i].Msg == "" {
			t.Errorf("problem %d: %+v, want line %d key %s", i, got[i], want[i].Line, want[i].Key)
		}
	}
}
