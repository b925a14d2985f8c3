package daemon

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fibril-edge/fibril/internal/wiretest"
)

func TestParseTokens(t *testing.T) {
	for _, tc := range []struct {
		text string
		want []string
		err  string
	}{
		{"", nil, ""},
		{"\n\n  \n# only comments\n   # indented comment\n", nil, ""},
		{"one\ntwo\r\n  three  \n\tfour\t\n", []string{"one", "two", "three", "four"}, ""},
		{"# site tokens\nmetrics-scraper\n\nwith#hash # not a comment\nlast-without-newline", []string{"metrics-scraper", "with#hash # not a comment", "last-without-newline"}, ""},
		{"ok\nbad\x00token\n", nil, "line 2: control character"},
		{"ok\n\n" + strings.Repeat("x", maxTokenLen+1) + "\n", nil, "line 3: token longer than 65535 bytes"},
		{strings.Repeat("y", maxTokenLen) + "\n", []string{strings.Repeat("y", maxTokenLen)}, ""},
		{"a\n" + strings.Repeat("z", maxTokenLen+300), nil, "line 2: longer than 65535 bytes"},
	} {
		got, err := parseTokens(strings.NewReader(tc.text))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%.40q: error %v, want %q", tc.text, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%.40q: %q, %v; want %q", tc.text, got, err, tc.want)
		}
	}
}

// FuzzParseTokens: whatever the file holds, parseTokens returns tokens
// that are not empty, carry no surrounding space, no control character
// and no leading #, fit the limit, and read back the same when written
// one a line.
func FuzzParseTokens(f *testing.F) {
	for _, s := range []string{"", "a\nb\n", "# c\n  x y  \r\n\n", "\x00", "#\n#x\n y#", strings.Repeat("q", 70000)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tokens, err := parseTokens(strings.NewReader(string(data)))
		if err != nil {
			return
		}
		for _, tok := range tokens {
			if tok == "" || tok != strings.TrimSpace(tok) || strings.HasPrefix(tok, "#") || len(tok) > maxTokenLen ||
				strings.ContainsAny(tok, "\x00\n\r") {
				t.Fatalf("bad token %q from %q", tok, data)
			}
		}
		again, err := parseTokens(strings.NewReader(strings.Join(tokens, "\n")))
		if err != nil || !reflect.DeepEqual(again, tokens) {
			t.Fatalf("tokens %q read back as %q, %v", tokens, again, err)
		}
	})
}

func writeTokens(t *testing.T, dir, name, text string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return path
}

// TestResolveTokens: tokens_file and the systemd credential add their
// tokens to [server] tokens, once each; a world-readable, missing or
// empty file is refused with an error naming it and the key.
func TestResolveTokens(t *testing.T) {
	dir := t.TempDir()
	creds := filepath.Join(dir, "creds")
	if err := os.Mkdir(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	writeTokens(t, creds, CredentialName, "# from systemd\ncred-token\nshared\n", 0o400)

	c := Default()
	c.Server.Tokens = []string{"inline", "shared"}
	c.Server.TokensFile = writeTokens(t, dir, "tokens", "file-token\n# comment\nshared\n", 0o640)
	got, err := c.ResolveTokens(creds)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"inline", "shared", "file-token", "cred-token"}
	if !reflect.DeepEqual(got.Server.Tokens, want) {
		t.Fatalf("tokens %q, want %q", got.Server.Tokens, want)
	}
	if again, err := got.ResolveTokens(creds); err != nil || !reflect.DeepEqual(again.Server.Tokens, want) {
		t.Fatalf("resolved twice: %q, %v", again.Server.Tokens, err)
	}
	if !reflect.DeepEqual(c.Server.Tokens, []string{"inline", "shared"}) {
		t.Fatalf("ResolveTokens changed its receiver's tokens: %q", c.Server.Tokens)
	}
	// No credentials directory, or one without the credential: the file only.
	for _, d := range []string{"", dir + "/nonexistent"} {
		got, err := c.ResolveTokens(d)
		if err != nil || len(got.Server.Tokens) != 3 {
			t.Fatalf("credentials dir %q: %q, %v", d, got.Server.Tokens, err)
		}
	}

	for _, tc := range []struct {
		name, text string
		mode       os.FileMode
		want       string
	}{
		{"world", "t\n", 0o644, "readable by every user of the machine (mode 0644): run chmod o-r"},
		{"empty", "# nothing yet\n\n", 0o600, "holds no token"},
		{"binary", "t\x01\n", 0o600, "line 1: control character"},
	} {
		c := Default()
		c.Server.TokensFile = writeTokens(t, dir, tc.name, tc.text, tc.mode)
		_, err := c.ResolveTokens("")
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "server.tokens_file") ||
			!strings.Contains(err.Error(), c.Server.TokensFile) {
			t.Errorf("%s: %v, want an error naming server.tokens_file, the file and %q", tc.name, err, tc.want)
		}
	}
	c = Default()
	c.Server.TokensFile = filepath.Join(dir, "absent")
	if _, err := c.ResolveTokens(""); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	// The credential is held to the same rules.
	loose := filepath.Join(dir, "loose")
	if err := os.Mkdir(loose, 0o755); err != nil {
		t.Fatal(err)
	}
	writeTokens(t, loose, CredentialName, "t\n", 0o644)
	if _, err := Default().ResolveTokens(loose); !errors.Is(err, errWorldReadable) || !strings.Contains(err.Error(), "systemd credential tokens") {
		t.Errorf("world-readable credential: %v", err)
	}
}

// TestRunTakesTokensFromFile: Run serves the client protocol and the
// admin API with the tokens of tokens_file as well as [server] tokens.
func TestRunTakesTokensFromFile(t *testing.T) {
	cfg := Default()
	cfg.Server.Listen = "127.0.0.1:0"
	cfg.Server.Tokens = []string{"inline"}
	cfg.Server.TokensFile = writeTokens(t, t.TempDir(), "tokens", "# the site's scraper\nfrom-file\n", 0o600)
	cfg.Storage.DataDir = t.TempDir()
	cfg.Storage.MinFree = 0
	addr, adminAddr, stop := startRunAdmin(t, cfg)
	wc := wiretest.Dial(t, addr, "from-file")
	wc.NC.Close()
	hc := &http.Client{Timeout: waitLimit}
	for tok, want := range map[string]int{"from-file": http.StatusOK, "inline": http.StatusOK, "# the site's scraper": http.StatusUnauthorized, "": http.StatusUnauthorized} {
		req, _ := http.NewRequest("GET", "http://"+adminAddr+"/api/queues", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("token %q: %d, want %d", tok, resp.StatusCode, want)
		}
	}
	hc.CloseIdleConnections()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
