package daemon

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/federation"
	"github.com/fibril-edge/fibril/internal/wiretest"
)

// TestRunServesAdmin checks that Run serves the admin API on [admin]
// listen with the [server] tokens, counts wire connections in /metrics,
// and stops it on shutdown.
func TestRunServesAdmin(t *testing.T) {
	cfg := Default()
	cfg.Server.Listen = "127.0.0.1:0"
	cfg.Server.Tokens = []string{"tok"}
	cfg.Storage.DataDir = t.TempDir()
	cfg.Storage.MinFree = 0
	addr, adminAddr, stop := startRunAdmin(t, cfg)
	hc := &http.Client{Timeout: waitLimit}
	call := func(method, path, token, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+adminAddr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := call("GET", "/healthz", "", ""); code != http.StatusOK {
		t.Fatalf("healthz %d", code)
	}
	if code, _ := call("GET", "/api/queues", "", ""); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", code)
	}
	if code, body := call("POST", "/api/queues", "tok", `{"name":"clicks","durability":"buffered"}`); code != http.StatusCreated {
		t.Fatalf("declare: %d %s", code, body)
	}
	if code, body := call("POST", "/api/queues/clicks/messages", "tok", `{"body":"hi"}`); code != http.StatusOK {
		t.Fatalf("publish: %d %s", code, body)
	}
	wc := wiretest.Dial(t, addr, "tok")
	code, body := call("GET", "/metrics", "tok", "")
	if code != http.StatusOK || !strings.Contains(body, "fibril_connections 1\n") ||
		!strings.Contains(body, "fibril_connections_refused_total 0\n") ||
		!strings.Contains(body, `fibril_confirms_total{mode="buffered",queue="clicks"} 1`) {
		t.Fatalf("metrics %d:\n%s", code, body)
	}
	wc.NC.Close()
	hc.CloseIdleConnections()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", adminAddr, time.Second); err == nil {
		c.Close()
		t.Fatal("admin API still listening after shutdown")
	}
}

// TestRunAdminHosts: the admin API answers for localhost, IP addresses,
// the machine's host name and [admin] hosts, and refuses any other Host
// with 421.
func TestRunAdminHosts(t *testing.T) {
	cfg := Default()
	cfg.Server.Listen = "127.0.0.1:0"
	cfg.Admin.Hosts = []string{"fibril.site.lan"}
	cfg.Storage.DataDir = t.TempDir()
	cfg.Storage.MinFree = 0
	_, adminAddr, stop := startRunAdmin(t, cfg)
	hc := &http.Client{Timeout: waitLimit}
	hosts := map[string]int{"localhost": 200, adminAddr: 200, "fibril.site.lan:7421": 200, "FIBRIL.site.lan": 200,
		"evil.example": http.StatusMisdirectedRequest, "fibril.site.lan.evil.example": http.StatusMisdirectedRequest}
	if name, err := os.Hostname(); err == nil && name != "" {
		hosts[name+":7421"] = 200
	}
	for host, want := range hosts {
		req, _ := http.NewRequest("GET", "http://"+adminAddr+"/api/queues", nil)
		req.Host = host
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %q: %d, want %d", host, resp.StatusCode, want)
		}
	}
	hc.CloseIdleConnections()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestRunAdminTLS: with [admin] tls_cert and tls_key the admin API speaks
// HTTPS only, TLS 1.3 or TLS 1.2 with AEAD suites, HTTP/1.1; a client
// that trusts the CA reaches it.
func TestRunAdminTLS(t *testing.T) {
	cfg := Default()
	cfg.Server.Listen = "127.0.0.1:0"
	cfg.Storage.DataDir = t.TempDir()
	cfg.Storage.MinFree = 0
	var caPEM []byte
	caPEM, cfg.Admin.TLSCert, cfg.Admin.TLSKey = testCert(t, "admin")
	_, adminAddr, stop := startRunAdmin(t, cfg)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := func(c *tls.Config) *http.Client {
		c.RootCAs = pool
		return &http.Client{Timeout: waitLimit, Transport: &http.Transport{TLSClientConfig: c, ForceAttemptHTTP2: true}}
	}
	hc := client(&tls.Config{})
	resp, err := hc.Get("https://" + adminAddr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil || resp.TLS.Version != tls.VersionTLS13 || resp.ProtoMajor != 1 {
		t.Fatalf("https: %d, TLS %v, %s", resp.StatusCode, resp.TLS != nil, resp.Proto)
	}
	hc.CloseIdleConnections()
	aead := client(&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}})
	if resp, err := aead.Get("https://" + adminAddr + "/healthz"); err != nil {
		t.Fatalf("TLS 1.2 with an AEAD suite: %v", err)
	} else {
		resp.Body.Close()
	}
	aead.CloseIdleConnections()
	cbc := client(&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA}})
	if resp, err := cbc.Get("https://" + adminAddr + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatal("TLS 1.2 with a CBC suite was accepted")
	}
	plain := &http.Client{Timeout: waitLimit}
	if resp, err := plain.Get("http://" + adminAddr + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP was served on the TLS admin listener")
		}
	}
	plain.CloseIdleConnections()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// The client port takes the same TLS settings as the admin and cluster
// ports: TLS 1.3, or 1.2 with an AEAD suite; a CBC suite is refused.
func TestClientPortTLSIsAEADOnly(t *testing.T) {
	cfg := Default()
	cfg.Server.Listen = "127.0.0.1:0"
	cfg.Storage.DataDir = t.TempDir()
	cfg.Storage.MinFree = 0
	var caPEM []byte
	caPEM, cfg.Server.TLSCert, cfg.Server.TLSKey = testCert(t, "client-port")
	addr, stop := startRun(t, cfg)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	handshake := func(c *tls.Config) error {
		c.RootCAs = pool
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: waitLimit}, "tcp", addr, c)
		if err != nil {
			return err
		}
		return conn.Close()
	}
	if err := handshake(&tls.Config{}); err != nil {
		t.Fatalf("TLS 1.3: %v", err)
	}
	if err := handshake(&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}}); err != nil {
		t.Fatalf("TLS 1.2 with an AEAD suite: %v", err)
	}
	if err := handshake(&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA}}); err == nil {
		t.Fatal("TLS 1.2 with a CBC suite was accepted on the client port")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// testCert makes a CA and a certificate for 127.0.0.1 signed by it, and
// returns the CA's PEM and the paths of the certificate and its key.
func testCert(t *testing.T, name string) (caPEM []byte, certPath, keyPath string) {
	t.Helper()
	dir := t.TempDir()
	caPEM, caKey, err := federation.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := federation.NewNodeCert(caPEM, caKey, name, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := os.WriteFile(certPath, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return caPEM, certPath, keyPath
}
