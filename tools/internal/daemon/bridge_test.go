package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/internal/brokertest"
	"github.com/fibril-edge/fibril/internal/testcert"
)

const bridgeTOML = `
[[bridge.nats]]
name = "site"
urls = ["%s"]

[[bridge.nats.ingest]]
subject = "sensors.*.temp"
queue = "temp-{1}"

[[bridge.nats.egress]]
queue = "commands"
subject = "cmd.out"
`

func TestBridgeConfig(t *testing.T) {
	data := []byte(fmt.Sprintf(bridgeTOML, "nats://127.0.0.1:4222"))
	cfg, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if n := cfg.Bridge.NATS; len(n) != 1 || n[0].Name != "site" || len(n[0].Ingest) != 1 || n[0].Ingest[0].Queue != "temp-{1}" || len(n[0].Egress) != 1 {
		t.Fatalf("parsed %+v", cfg.Bridge)
	}
	if ps := Check(data); len(ps) != 0 {
		t.Fatalf("Check: %v", ps)
	}
	timed, err := Parse([]byte(strings.Replace(strings.Replace(string(data),
		"urls =", "drain_timeout = \"2s\"\nurls =", 1), "cmd.out\"", "cmd.out\"\nextend_every = \"3s\"", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if o := timed.Bridge.NATS[0].bridgeOptions(0, "127.0.0.1:7420", "", nil); o.DrainTimeout != 2*time.Second || o.Egress[0].ExtendEvery != 3*time.Second {
		t.Fatalf("drain_timeout %v, extend_every %v: want 2s and 3s", o.DrainTimeout, o.Egress[0].ExtendEvery)
	}
	bad := strings.Replace(string(data), "temp-{1}", "temp-{2}", 1)
	ps := Check([]byte(bad))
	if len(ps) != 1 || ps[0].Key != "bridge.nats" || !strings.Contains(ps[0].Msg, "{2} but the subject has 1 wildcard") {
		t.Fatalf("Check of a bad template: %v", ps)
	}
	if _, err := Parse([]byte("[[bridge.nats]]\nurl = \"x\"\n")); err == nil || !strings.Contains(err.Error(), "bridge.nats.url") {
		t.Fatalf("unknown key: %v", err)
	}
	for _, k := range Keys() {
		if strings.HasPrefix(k.Name, "bridge.") {
			t.Errorf("bridge tables are not flag keys: %s", k.Name)
		}
	}
}

// A [[bridge.nats]] in fibril.toml runs inside Run: a core NATS message
// lands in its queue.
func TestRunBridge(t *testing.T) {
	runBridgeMessage(t, func(*Config) {}, client.Options{})
}

// With [server] TLS on, the bridge reaches the client listener over TLS,
// trusting the listener's own certificate.
func TestRunBridgeTLS(t *testing.T) {
	cert, pool := testcert.SelfSigned(t)
	certFile, keyFile := writeCert(t, cert)
	runBridgeMessage(t, func(c *Config) {
		c.Server.TLSCert, c.Server.TLSKey = certFile, keyFile
		c.Server.Tokens = []string{"s3cret"}
	}, client.Options{TLS: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}, Token: "s3cret"})
}

// A fixed ingest queue that does not exist is reported in /api/bridges at
// start, before any message needs it, and no longer once it is declared.
func TestRunBridgeMissingQueue(t *testing.T) {
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	t.Cleanup(ns.Shutdown)
	cfg, err := Parse([]byte(fmt.Sprintf("[[bridge.nats]]\nname = \"site\"\nurls = [%q]\n[[bridge.nats.ingest]]\nsubject = \"events.>\"\nqueue = \"events\"\n", ns.ClientURL())))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Server.Listen = "127.0.0.1:0"
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.Storage.DataDir = t.TempDir()
	cfg.Storage.MinFree = 0
	addr, admin, stop := startRunAdmin(t, cfg)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	missing := func() []string {
		res, err := http.Get("http://" + admin + "/api/bridges")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var r struct {
			Bridges []struct {
				MissingQueues []string `json:"missing_queues"`
			} `json:"bridges"`
		}
		if err := json.NewDecoder(res.Body).Decode(&r); err != nil || len(r.Bridges) > 1 {
			t.Fatalf("GET /api/bridges: %v %+v", err, r)
		}
		if len(r.Bridges) == 0 { // the admin API answers before the bridges start
			return nil
		}
		return r.Bridges[0].MissingQueues
	}
	await.Within(t, waitLimit, "the missing queue reported", func() bool { return slices.Equal(missing(), []string{"events"}) })
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.DeclareQueue(ctx, client.Queue("events").Buffered()); err != nil {
		t.Fatal(err)
	}
	if m := missing(); len(m) != 0 {
		t.Fatalf("missing after the declare: %v", m)
	}
}

// selfTLS trusts the daemon's own certificate and no other, whatever
// names it carries.
func TestSelfTLS(t *testing.T) {
	own, _ := testcert.SelfSigned(t)
	other, _ := testcert.SelfSigned(t)
	if selfTLS(nil) != nil {
		t.Fatal("selfTLS without server TLS")
	}
	cfg := selfTLS(&tls.Config{Certificates: []tls.Certificate{own}})
	for _, tc := range []struct {
		name  string
		serve tls.Certificate
		want  error
	}{{"own certificate", own, nil}, {"another certificate", other, errNotOwnCert}} {
		c, s := net.Pipe()
		srv := tls.Server(s, &tls.Config{Certificates: []tls.Certificate{tc.serve}})
		done := make(chan error, 1)
		go func() { done <- srv.Handshake(); s.Close() }()
		cc := cfg.Clone()
		cc.ServerName = "fibril.example" // not a name the certificates carry
		err := tls.Client(c, cc).Handshake()
		c.Close()
		<-done
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: handshake %v, want %v", tc.name, err, tc.want)
		}
	}
}

// writeCert writes cert and its key as PEM files in a temp dir.
func writeCert(t *testing.T, cert tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// runBridgeMessage runs the daemon with bridgeTOML (changed by edit)
// against an embedded NATS server and checks that a core message published
// to NATS lands in its queue; copts dial the daemon.
func runBridgeMessage(t *testing.T, edit func(*Config), copts client.Options) {
	copts.Logger = slog.New(slog.DiscardHandler)
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	t.Cleanup(ns.Shutdown)

	cfg, err := Parse([]byte(fmt.Sprintf(bridgeTOML, ns.ClientURL())))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Server.Listen = "127.0.0.1:0"
	cfg.Admin.Listen = ""
	cfg.Storage.DataDir = t.TempDir()
	cfg.Storage.MinFree = 0
	edit(&cfg)
	addr, stop := startRun(t, cfg)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	c, err := client.Dial(ctx, addr, copts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.DeclareQueue(ctx, client.Queue("temp-k7").Buffered()); err != nil {
		t.Fatal(err)
	}
	cons, err := c.Consume(ctx, "temp-k7", 10)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// The bridge subscribes in the background; publish until one arrives.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case d := <-cons.Messages():
			if v, _ := d.Header("nats-subject"); string(d.Body) != "21.5" || v != "sensors.k7.temp" {
				t.Fatalf("got %q subject %q", d.Body, v)
			}
			_ = d.Ack()
			return
		case <-tick.C:
			if err := nc.Publish("sensors.k7.temp", []byte("21.5")); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("no message from the bridge")
		}
	}
}

// A bridge's start is logged with its URLs, without the credentials one
// may carry.
func TestStartBridgesLogsURLsWithoutCredentials(t *testing.T) {
	var buf brokertest.LogBuffer
	var cfg Config
	cfg.Bridge.NATS = []NATSBridgeConfig{{Name: "b", URLs: []string{"nats://alice:s3cret@127.0.0.1:1"},
		Ingest: []NATSIngestConfig{{Subject: "a", Queue: "q"}}}}
	rb, err := startBridges(cfg, "127.0.0.1:1", nil, nil, buf.Logger())
	if err != nil {
		t.Fatal(err)
	}
	rb.stop()
	if out := buf.String(); strings.Contains(out, "s3cret") || !strings.Contains(out, "bridge started") {
		t.Fatalf("log:\n%s", out)
	}
}
