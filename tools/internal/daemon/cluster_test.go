package daemon

import (
	"strings"
	"testing"
)

func TestClusterConfigProblems(t *testing.T) {
	for _, tc := range []struct {
		name, toml, key string
	}{
		{"bad peer", "[cluster]\nlisten = \"127.0.0.1:7422\"\nbootstrap = true\npeers = [\"10.0.0.2:7422\"]\n", "cluster.peers"},
		{"non-voter bootstrap", "[cluster]\nlisten = \"127.0.0.1:7422\"\nbootstrap = true\nnon_voter = true\n", "cluster.bootstrap"},
		{"half TLS", "[cluster]\nlisten = \"127.0.0.1:7422\"\nbootstrap = true\ntls_cert = \"c.pem\"\n", "cluster.tls_cert"},
		{"bad listen", "[cluster]\nlisten = \"nowhere\"\nbootstrap = true\n", "cluster.listen"},
		{"bad default policy", "[cluster]\nlisten = \"127.0.0.1:7422\"\nbootstrap = true\ndefault_policy = \"quorum:2\"\n", "cluster.default_policy"},
		{"off loopback without TLS", "[cluster]\nlisten = \"0.0.0.0:7422\"\nbootstrap = true\n", "cluster.listen"},
		{"every interface without TLS", "[cluster]\nlisten = \":7422\"\nbootstrap = true\n", "cluster.listen"},
		{"follower hold too short", "[cluster]\nlisten = \"127.0.0.1:7422\"\nbootstrap = true\nfollower_hold = \"5s\"\n", "cluster.follower_hold"},
		{"advertise port 0", "[cluster]\nlisten = \"127.0.0.1:0\"\nadvertise = \"10.0.0.1:0\"\nbootstrap = true\n", "cluster.advertise"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.toml))
			if err != nil {
				t.Fatal(err)
			}
			err = c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("Validate = %v, want a problem with %s", err, tc.key)
			}
		})
	}
	c, err := Parse([]byte("[cluster]\nnode_id = \"n1\"\nlisten = \"127.0.0.1:7422\"\nbootstrap = true\npeers = [\"n2@127.0.0.1:7423\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("a good [cluster]: %v", err)
	}
	if peers, _ := c.Cluster.peers(); len(peers) != 1 || peers[0].ID != "n2" || peers[0].Addr != "127.0.0.1:7423" {
		t.Fatalf("peers %+v", peers)
	}
	var b Bool
	if err := b.UnmarshalText([]byte("maybe")); err == nil {
		t.Fatal("maybe read as a boolean")
	}
}

// Off loopback the client port and the admin API need tokens and the
// cluster port mutual TLS, unless the operator says insecure = true.
func TestInsecureOnlyWhenAsked(t *testing.T) {
	for _, tc := range []struct {
		toml, problem string
	}{
		{"[server]\nlisten = \"0.0.0.0:7420\"\n", "server.listen"},
		{"[server]\nlisten = \":7420\"\n", "server.listen"},
		{"[server]\nlisten = \"0.0.0.0:7420\"\ninsecure = true\n", ""},
		{"[server]\nlisten = \"10.0.0.1:7420\"\ntokens_file = \"/etc/fibril/tokens\"\n", ""},
		{"[server]\nlisten = \"[::1]:7420\"\n", ""},
		{"[admin]\nlisten = \"0.0.0.0:7421\"\n", "admin.listen"},
		{"[admin]\nlisten = \"0.0.0.0:7421\"\ninsecure = true\n", ""},
		{"[server]\ntokens = [\"s3cret\"]\n[admin]\nlisten = \"10.0.0.1:7421\"\n", ""},
		{"[admin]\nlisten = \"localhost:7421\"\n", ""},
		{"[cluster]\nlisten = \"10.0.0.1:7422\"\nbootstrap = true\n", "cluster.listen"},
		{"[cluster]\nlisten = \"10.0.0.1:7422\"\nbootstrap = true\ninsecure = true\n", ""},
		{"[cluster]\nlisten = \"[::1]:7422\"\nbootstrap = true\n", ""},
	} {
		c, err := Parse([]byte(tc.toml))
		if err != nil {
			t.Fatal(err)
		}
		err = c.Validate()
		switch {
		case tc.problem == "" && err != nil:
			t.Errorf("%q: %v", tc.toml, err)
		case tc.problem != "" && (err == nil || !strings.Contains(err.Error(), tc.problem)):
			t.Errorf("%q: %v, want a problem with %s", tc.toml, err, tc.problem)
		}
	}
}
