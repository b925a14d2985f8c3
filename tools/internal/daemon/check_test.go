package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fibril-edge/fibril/federation"
	"github.com/fibril-edge/fibril/internal/testcert"
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

// The cluster's certificate must name this node and be signed by the CA
// beside it: --check-config reports it at the tls_cert line, as the start
// refuses it, and passes the right one.
func TestCheckClusterCertificateNamesTheNode(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string { return testcert.WriteFile(t, dir, name, data) }
	caCert, caKey, err := federation.NewCA("site")
	if err != nil {
		t.Fatal(err)
	}
	otherCA, _, err := federation.NewCA("elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	n1Cert, n1Key, err := federation.NewNodeCert(caCert, caKey, "n1", nil)
	if err != nil {
		t.Fatal(err)
	}
	ca, other, cert, key := write("ca.pem", caCert), write("other.pem", otherCA), write("n1.pem", n1Cert), write("n1.key", n1Key)
	conf := func(id, ca string) []byte {
		return fmt.Appendf(nil, "[cluster]\nnode_id = %q\nlisten = \"10.0.0.1:7422\"\ntls_cert = %q\ntls_key = %q\ntls_ca = %q\n", id, cert, key, ca)
	}
	if got := Check(conf("n1", ca)); len(got) != 0 {
		t.Fatalf("n1's own certificate: %v", got)
	}
	for _, c := range []struct{ id, ca, want string }{{"n2", ca, `for node "n1"`}, {"n1", other, "not a valid certificate"}} {
		got := Check(conf(c.id, c.ca))
		if len(got) != 1 || got[0].Key != "cluster.tls_cert" || got[0].Line != 4 || !strings.Contains(got[0].Msg, c.want) {
			t.Errorf("node %s with CA %s: %v, want one cluster.tls_cert problem on line 4 saying %q", c.id, c.ca, got, c.want)
		}
	}
}

// An admin listener off loopback whose tokens come only from the systemd
// credential passes the check run under systemd, as the start does, and
// is reported without it.
func TestCheckCountsTheCredentialTokens(t *testing.T) {
	conf := []byte("[admin]\nlisten = \"10.0.0.1:7421\"\n")
	t.Setenv("CREDENTIALS_DIRECTORY", "")
	if got := Check(conf); len(got) != 1 || got[0].Key != "admin.listen" {
		t.Fatalf("no tokens anywhere: %v, want the admin.listen problem", got)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, CredentialName), []byte("s3cret-token-for-the-admin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CREDENTIALS_DIRECTORY", dir)
	if got := Check(conf); len(got) != 0 {
		t.Fatalf("tokens from the credential: %v, want none", got)
	}
}
