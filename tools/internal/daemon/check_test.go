package daemon

import (
	"strings"
	"testing"
)

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

// What a lax reading would take silently is reported: a bare number for
// a duration (nanoseconds), a negative size given as a TOML integer, a
// port past 65535, a peer's port that is a name.
func TestCheckRefusesWhatALaxReadingTakes(t *testing.T) {
	text := "[server]\nlisten = \"127.0.0.1:99999\"\nheartbeat = 5\n[storage]\ndisk_budget = -1\nmin_free = \"64MiB\"\n" +
		"[cluster]\nlisten = \"127.0.0.1:7422\"\npeers = [\"n2@127.0.0.1:http\"]\nfailover_timeout = 3000\n"
	want := []struct {
		line int
		key  string
		has  string
	}{
		{2, "server.listen", "0 to 65535"},
		{3, "server.heartbeat", "bare number"},
		{5, "storage.disk_budget", "negative"},
		{9, "cluster.peers", "0 to 65535"},
		{10, "cluster.failover_timeout", "bare number"},
	}
	got := Check([]byte(text))
	if len(got) != len(want) {
		t.Fatalf("got %v, want %d problems", got, len(want))
	}
	for i, w := range want {
		if got[i].Line != w.line || got[i].Key != w.key || !strings.Contains(got[i].Msg, w.has) {
			t.Errorf("problem %d: %+v, want line %d key %s saying %q", i, got[i], w.line, w.key, w.has)
		}
	}
}
