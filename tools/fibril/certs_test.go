package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
)

// fibril cluster certs makes a CA and node certificates that name their
// node and verify against the CA; it never overwrites one, and keys are
// readable by their owner only.
func TestClusterCerts(t *testing.T) {
	dir := t.TempDir()
	runCLI("cluster", "certs", "ca", "--dir", dir).want(t, 0, "ca.pem", "")
	runCLI("cluster", "certs", "node", "n1", "--host", "10.0.0.1", "--host", "edge-1.local", "--dir", dir).want(t, 0, "n1.pem", "")
	runCLI("cluster", "certs", "ca", "--dir", dir).want(t, 1, "", "exists")
	runCLI("cluster", "certs", "node", "n1", "--dir", dir).want(t, 1, "", "exists")
	runCLI("cluster", "certs", "node", "--dir", dir).want(t, 2, "", "")
	runCLI("cluster", "certs", "bogus", "--dir", dir).want(t, 2, "", "not ca or node")
	for _, id := range []string{"../n2", "a/b", "..", "n\n3"} { // an ID names files in --dir
		runCLI("cluster", "certs", "node", id, "--dir", dir).want(t, 2, "", "not a node ID")
	}
	// A link left where a key goes is not followed.
	if err := os.Symlink(filepath.Join(t.TempDir(), "elsewhere"), filepath.Join(dir, "n4-key.pem")); err != nil {
		t.Fatal(err)
	}
	runCLI("cluster", "certs", "node", "n4", "--dir", dir).want(t, 1, "", "exists")

	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "n1.pem"), filepath.Join(dir, "n1-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("n1's certificate does not verify against the CA: %v", err)
	}
	if leaf.Subject.CommonName != "n1" || len(leaf.IPAddresses) != 1 || leaf.IPAddresses[0].String() != "10.0.0.1" {
		t.Fatalf("n1's certificate names %q, addresses %v", leaf.Subject.CommonName, leaf.IPAddresses)
	}
	for _, key := range []string{"ca-key.pem", "n1-key.pem"} {
		st, err := os.Stat(filepath.Join(dir, key))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, mode %v", key, err, st.Mode().Perm())
		}
	}
}
