package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/internal/fibrildproc"
	"github.com/fibril-edge/fibril/internal/wiretest"
)

// adminConn is one raw HTTP/1.1 connection to the admin API, kept open
// between requests.
type adminConn struct {
	net.Conn
	r *bufio.Reader
}

func dialAdmin(t *testing.T, addr string) *adminConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, waitLimit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &adminConn{Conn: c, r: bufio.NewReader(c)}
}

// send writes a GET of path with token (none if empty).
func (c *adminConn) send(t *testing.T, path, token string) {
	t.Helper()
	req := "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
	if token != "" {
		req += "Authorization: Bearer " + token + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
}

// answer reads the answer to the request sent last, within waitLimit,
// and returns its status.
func (c *adminConn) answer(t *testing.T) int {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(waitLimit))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatalf("admin answer: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestAdminListenerProcess runs a real fibrild with tokens in a
// tokens_file and a systemd credential and [admin] max_connections = 4,
// and checks over loopback: both files' tokens open the admin API and the
// client protocol (a comment line does not); a foreign Host is refused
// and changes nothing; with 4 connections held open, 2 more are not
// served, and each is answered once a held one closes. A world-readable
// tokens file stops fibrild at start.
func TestAdminListenerProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the fibrild binary")
	}
	bin := buildDaemon(t)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("# the site's scraper\nfile-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(dir, "credentials")
	if err := os.Mkdir(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(creds, "tokens"), []byte("cred-token\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	const maxConns = 4
	p, err := fibrildproc.Start(ctx, fibrildproc.Options{Bin: bin, DataDir: filepath.Join(dir, "data"),
		Args: []string{"--storage.min_free", "0", "--server.tokens_file", tokens, "--admin.max_connections", "4"},
		Env:  []string{"CREDENTIALS_DIRECTORY=" + creds}, StartTimeout: waitLimit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	adminAddr := strings.TrimPrefix(p.Admin, "http://")

	t.Run("tokens", func(t *testing.T) {
		c := dialAdmin(t, adminAddr)
		for tok, want := range map[string]int{"file-token": 200, "cred-token": 200, "": 401, "# the site's scraper": 401} {
			c.send(t, "/api/queues", tok)
			if got := c.answer(t); got != want {
				t.Errorf("token %q: %d, want %d", tok, got, want)
			}
		}
		c.Close()
		wiretest.Dial(t, p.Addr, "file-token").NC.Close()
		wiretest.Dial(t, p.Addr, "cred-token").NC.Close()
	})

	t.Run("foreign host", func(t *testing.T) {
		hc := &http.Client{Timeout: waitLimit}
		defer hc.CloseIdleConnections()
		call := func(method, path, host, body string) int {
			req, _ := http.NewRequest(method, p.Admin+path, strings.NewReader(body))
			req.Host = host
			req.Header.Set("Authorization", "Bearer file-token")
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		if got := call("POST", "/api/queues", "rebound.example:7421", `{"name":"rebound"}`); got != http.StatusMisdirectedRequest {
			t.Fatalf("declare for a foreign Host: %d, want 421", got)
		}
		if got := call("GET", "/metrics", "rebound.example", ""); got != http.StatusMisdirectedRequest {
			t.Fatalf("metrics for a foreign Host: %d, want 421", got)
		}
		if got := call("GET", "/api/queues/rebound", "localhost", ""); got != http.StatusNotFound {
			t.Fatalf("the queue a foreign Host declared: %d, want 404", got)
		}
	})

	t.Run("connection limit", func(t *testing.T) {
		// Hold every connection: each is answered once, then kept alive.
		held := make([]*adminConn, maxConns)
		for i := range held {
			held[i] = dialAdmin(t, adminAddr)
			held[i].send(t, "/healthz", "")
			if got := held[i].answer(t); got != http.StatusOK {
				t.Fatalf("held connection %d: %d", i, got)
			}
		}
		// Two more wait in the accept queue with an authenticated request
		// each: nothing comes back while the held ones stay open.
		waiting := []*adminConn{dialAdmin(t, adminAddr), dialAdmin(t, adminAddr)}
		for _, c := range waiting {
			c.send(t, "/api/queues", "file-token")
		}
		for i, c := range waiting {
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			var ne net.Error
			if _, err := c.r.Peek(1); !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("connection %d past the limit was served (%v) while %d were held", maxConns+i+1, err, maxConns)
			}
		}
		// Each held connection that closes lets one waiting request in.
		held[0].Close()
		held[1].Close()
		for i, c := range waiting {
			if got := c.answer(t); got != http.StatusOK {
				t.Fatalf("waiting connection %d: %d, want 200", i, got)
			}
		}
	})

	if err := p.Stop(waitLimit); err != nil {
		t.Fatalf("fibrild exited with %v\n%s", err, p.Log())
	}

	// A tokens file every user can read keeps fibrild from starting.
	if err := os.Chmod(tokens, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = fibrildproc.Start(ctx, fibrildproc.Options{Bin: bin, DataDir: filepath.Join(dir, "data"),
		Args: []string{"--storage.min_free", "0", "--server.tokens_file", tokens}, StartTimeout: waitLimit})
	if !errors.Is(err, fibrildproc.ErrExited) || !strings.Contains(err.Error(), "readable by every user") ||
		!strings.Contains(err.Error(), "exit status 2") {
		t.Fatalf("start with a world-readable tokens file: %v", err)
	}
}
