package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/admin"
	"github.com/fibril-edge/fibril/federation"
)

// newAdmin serves the real admin API (package appliance/admin) over
// loopback HTTP, on a broker on an in-memory file system, with token as
// its only token.
func newAdmin(t *testing.T, token string) (*appliance.Broker, string) {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	b, err := appliance.Open(appliance.Options{DataDir: "data", FS: vfs.NewMem(), MinFreeBytes: -1, Logger: logger})
	if err != nil {
		t.Fatalf("open broker: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	srv, err := admin.New(b, admin.Options{Tokens: []string{token}, Logger: logger})
	if err != nil {
		t.Fatalf("admin server: %v", err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return b, hs.URL
}

// runCLI runs the CLI in-process.
func runCLI(args ...string) cliResult {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return cliResult{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

func TestAdminCommands(t *testing.T) {
	b, url := newAdmin(t, "s3cret")
	t.Setenv(envAdmin, url)
	t.Setenv(envToken, "s3cret")

	runCLI("queue", "ls").want(t, 0, "NAME", "no queues")
	runCLI("queue", "declare", "clicks", "--buffered", "--partitions", "2").want(t, 0, "declared clicks (buffered, 2 partitions)", "warning: Buffered queues")
	runCLI("queue", "declare", "clicks", "--durable").want(t, 4, "", "fibril queue rm clicks")
	runCLI("queue", "declare", "clicks", "--durable", "--buffered").want(t, 2, "", "exclude")
	runCLI("queue", "declare", "bad name").want(t, 1, "", "queue name \"bad name\"")
	runCLI("queue", "declare", "orders", "--dead-letter", "dlq", "--json").want(t, 0, `"dead_letter":"dlq"`, "")
	runCLI("queue", "ls").want(t, 0, "buffered (!)", "")
	r := runCLI("queue", "ls", "--json")
	if r.code != 0 || !json.Valid([]byte(r.stdout)) || !strings.Contains(r.stdout, `"orders"`) {
		t.Fatalf("queue ls --json: %+v", r)
	}
	r = runCLI("queue", "info", "clicks")
	r.want(t, 0, "durability:", "")
	if !strings.Contains(r.stdout, "DURABLE_NEXT") || strings.Count(r.stdout, "\n") < 5 {
		t.Fatalf("queue info: %s", r.stdout)
	}
	runCLI("queue", "info", "nosuch").want(t, 3, "", "not found")
	runCLI("queue", "info").want(t, 2, "", "missing NAME")

	runCLI("settings", "get").want(t, 0, "storage.background_sync_interval_ms = 100", "")
	runCLI("settings", "set", "storage.background_sync_interval_ms=250", "publish.buffered_coalesce=window").
		want(t, 0, "publish.buffered_coalesce           = window", "")
	r = runCLI("settings", "get", "storage.background_sync_interval_ms", "--json")
	if r.code != 0 || strings.TrimSpace(r.stdout) != `{"storage.background_sync_interval_ms":250}` {
		t.Fatalf("settings get --json: %+v", r)
	}
	runCLI("settings", "set", "storage.background_sync_interval_ms=-1").want(t, 1, "", "(0-60000)")
	runCLI("settings", "set", "nope=1").want(t, 3, "", "no setting \"nope\"")
	runCLI("settings", "set", "novalue").want(t, 2, "", "KEY=VALUE")

	for i := range 3 {
		if _, err := b.Publish(context.Background(), "clicks", appliance.Message{Body: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	runCLI("queue", "purge", "clicks").want(t, 1, "", "holds 3 ready messages; pass --force")
	runCLI("queue", "purge", "clicks", "--force").want(t, 0, "purged clicks: 3 messages discarded", "")
	runCLI("queue", "purge", "clicks", "--json").want(t, 0, `{"purged":0,"queue":"clicks"}`, "")
	runCLI("queue", "purge", "nosuch", "-f").want(t, 3, "", "not found")
	runCLI("queue", "mode", "clicks", "durable").want(t, 0, "clicks is durable", "")
	if c, err := b.Publish(context.Background(), "clicks", appliance.Message{Body: []byte("d")}); err != nil || c.Durability != appliance.Durable {
		t.Fatalf("a publish after queue mode durable: %+v, %v", c, err)
	}
	runCLI("queue", "mode", "clicks", "buffered", "--json").want(t, 0, `"durability":"buffered"`, "")
	runCLI("queue", "mode", "clicks", "sometimes").want(t, 2, "", "want durable or buffered")
	runCLI("queue", "mode", "clicks").want(t, 2, "", "")
	runCLI("queue", "mode", "nosuch", "durable").want(t, 3, "", "not found")
	runCLI("queue", "rm", "clicks", "--force").want(t, 0, "deleted clicks", "")
	runCLI("queue", "rm", "clicks").want(t, 3, "", "not found")
	runCLI("queue", "ls", "--token", "wrong").want(t, 1, "", "FIBRIL_TOKEN")
}

// TestAdminOverHTTPS: the admin commands reach an https:// --admin whose
// certificate the --admin-ca CA signed; without --admin-ca (a CA the
// system does not trust) they fail, and --admin-ca with an http:// URL
// is a usage error.
func TestAdminOverHTTPS(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	b, err := appliance.Open(appliance.Options{DataDir: "data", FS: vfs.NewMem(), MinFreeBytes: -1, Logger: logger})
	if err != nil {
		t.Fatalf("open broker: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	srv, err := admin.New(b, admin.Options{Tokens: []string{"s3cret"}, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	caPEM, caKey, err := federation.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := federation.NewNodeCert(caPEM, caKey, "admin", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(srv.Handler())
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	hs.StartTLS()
	t.Cleanup(hs.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envToken, "s3cret")
	t.Setenv(envAdminCA, "")

	runCLI("queue", "declare", "clicks", "--admin", hs.URL, "--admin-ca", caFile).want(t, 0, "declared clicks", "")
	t.Setenv(envAdminCA, caFile)
	runCLI("queue", "ls", "--admin", hs.URL).want(t, 0, "clicks", "")
	t.Setenv(envAdminCA, "")
	runCLI("queue", "ls", "--admin", hs.URL).want(t, 1, "", "certificate")
	runCLI("queue", "ls", "--admin", "http://127.0.0.1:7421", "--admin-ca", caFile).want(t, 2, "", "https://")
	runCLI("queue", "ls", "--admin", hs.URL, "--admin-ca", filepath.Join(t.TempDir(), "absent.pem")).want(t, 1, "", "--admin-ca")
}
