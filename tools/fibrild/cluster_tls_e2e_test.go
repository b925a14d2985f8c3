package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/admin"
	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/federation"
	"github.com/fibril-edge/fibril/internal/testcert"
)

// TestClusterMutualTLSProcess: three fibrild processes secure their
// cluster port with certificates made as `fibril cluster certs` makes
// them; the cluster forms and replicates. Against it, what the issue's
// attacker did without TLS fails: a plain TCP control request that
// deletes a queue, one over TLS with a certificate the cluster's CA did
// not sign, a join as n2 with a CA-signed certificate for another node,
// and an adopt of a queue on another node's behalf. The queue, its
// messages and the member list are unchanged.
func TestClusterMutualTLSProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three fibrild processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	write := func(name string, data []byte) string { return testcert.WriteFile(t, dir, name, data) }
	caCert, caKey, err := federation.NewCA("site7")
	if err != nil {
		t.Fatal(err)
	}
	ca := write("ca.pem", caCert)
	nodeCert := func(id string) (cert, key string) {
		c, k, err := federation.NewNodeCert(caCert, caKey, id, []string{"127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		return write(id+".pem", c), write(id+".key", k)
	}
	cp := startClusterProcsWith(t, ctx, func(id string) []string {
		cert, key := nodeCert(id)
		return []string{"--cluster.tls_cert", cert, "--cluster.tls_key", key, "--cluster.tls_ca", ca}
	})
	for _, id := range cp.ids {
		if !strings.Contains(cp.procs[id].Log(), "tls=true") {
			t.Fatalf("%s does not serve its cluster port over TLS:\n%s", id, cp.procs[id].Log())
		}
	}
	c := cp.dial(t, ctx, "n1")
	if _, err := c.DeclareQueue(ctx, client.Queue("orders").Durable()); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if _, err := c.Publish(ctx, "orders", client.Message{Body: []byte{byte(i)}}); err != nil {
			t.Fatalf("publish over a TLS cluster: %v", err)
		}
	}
	var v admin.ClusterView
	waitView(t, ctx, cp.procs["n1"].Admin, &v, func() bool {
		return len(v.Queues) == 1 && len(v.Queues[0].Partitions) == 1 && len(v.Queues[0].Partitions[0].Followers) == 2
	})
	owner := ownerOf(v, "orders")
	target := clusterListen(t, cp, owner)

	deleteOrders := controlLine(t, map[string]any{"command": map[string]any{"op": "delete_queue", "id": "orders"}})
	// Plain TCP: the port speaks TLS only.
	if answer, err := plainControl(target, deleteOrders); err == nil && answer != "" {
		t.Fatalf("a plain TCP control request was answered: %s", answer)
	}
	// A certificate the cluster's CA did not sign.
	otherCA, otherKey, err := federation.NewCA("elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	foreignCert, foreignKey, err := federation.NewNodeCert(otherCA, otherKey, owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	if answer, err := tlsControl(t, target, foreignCert, foreignKey, deleteOrders); err == nil && answer != "" {
		t.Fatalf("a control request with a foreign CA's certificate was answered: %s", answer)
	}
	// Signed by the cluster's CA, but for n9: it may not join as n2, nor
	// bring a queue along for n2.
	n9Cert, n9Key, err := federation.NewNodeCert(caCert, caKey, "n9", nil)
	if err != nil {
		t.Fatal(err)
	}
	join := controlLine(t, map[string]any{"join": map[string]any{"id": "n2", "cluster_addr": "127.0.0.1:1", "voter": true}})
	adopt := controlLine(t, map[string]any{"command": map[string]any{"op": "adopt", "owner": "n2",
		"queue": map[string]any{"Name": "stolen", "Durability": 1, "Partitions": 1}}})
	for what, req := range map[string][]byte{"join as n2": join, "adopt for n2": adopt} {
		answer, err := tlsControl(t, target, n9Cert, n9Key, req)
		if err != nil || !strings.Contains(answer, `"code":"invalid"`) || !strings.Contains(answer, "n9") {
			t.Fatalf("%s with n9's certificate: answer %q (%v), want a refusal naming n9", what, answer, err)
		}
	}
	waitView(t, ctx, cp.procs["n1"].Admin, &v, func() bool { return true })
	if len(v.Members) != 3 || len(v.Queues) != 1 || v.Queues[0].Name != "orders" {
		t.Fatalf("after the attempts the cluster reads %+v", v)
	}
	for _, m := range v.Members {
		if m.ID == "n2" && m.ClusterAddr == "127.0.0.1:1" {
			t.Fatalf("n2's address was replaced: %+v", v.Members)
		}
	}
	cons, err := c.Consume(ctx, "orders", 100)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for i := range 100 {
		select {
		case d := <-cons.Messages():
			if err := d.Ack(); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatalf("after the attempts %d of 100 messages were delivered", i)
		}
	}
}

// controlLine encodes one control request as the cluster port reads it.
func controlLine(t *testing.T, req map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// plainControl sends 'C' and req over plain TCP and returns what comes
// back before the port hangs up.
func plainControl(addr string, req []byte) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	return askControl(conn, req)
}

// tlsControl sends 'C' and req over TLS with the certificate given and
// returns the answer line, or the handshake's error.
func tlsControl(t *testing.T, addr string, certPEM, keyPEM, req []byte) (string, error) {
	t.Helper()
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12,
			VerifyConnection: func(tls.ConnectionState) error { return nil }, RootCAs: x509.NewCertPool()})
	if err != nil {
		return "", err
	}
	return askControl(conn, req)
}

// askControl sends the control protocol's byte and req on conn, reads the
// answer line and closes conn.
func askControl(conn net.Conn, req []byte) (string, error) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := conn.Write(append([]byte{'C'}, req...)); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(line), err
}
