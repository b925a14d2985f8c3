package server

import (
	"crypto/tls"
	"crypto/x509"
	"github.com/fibril-edge/fibril/internal/testcert"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// selfSigned returns a server certificate for 127.0.0.1 and a pool that
// trusts it.
// selfSigned makes a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) { return testcert.SelfSigned(t) }

func TestTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	ts := startServer(t, Options{TLS: &tls.Config{Certificates: []tls.Certificate{cert}}, HelloTimeout: 300 * time.Millisecond})

	nc, err := tls.Dial("tcp", ts.addr, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatalf("TLS dial: %v", err)
	}
	t.Cleanup(func() { nc.Close() })
	c := &client{t: t, nc: nc, r: wire.NewReader(nc, wire.Options{}), w: wire.NewWriter(nc, wire.Options{})}
	c.send(&wire.Hello{Version: 1})
	if _, ok := c.read().(*wire.HelloOK); !ok {
		t.Fatal("want HelloOK")
	}
	c.declare(&wire.Declare{Queue: "secure"})
	c.publish("secure", []byte("over TLS"))

	// A plain-text client cannot talk to a TLS listener, and is closed.
	plain := dial(t, ts.addr)
	plain.send(&wire.Hello{Version: 1})
	plain.expectClosed()
}
