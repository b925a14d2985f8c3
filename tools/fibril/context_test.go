package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Contexts: one added is selected and gives the admin commands their URL
// and token; the file is 0600; a second context named by FIBRIL_CONTEXT
// is used for one command, its admin API derived from its server's host;
// a flag wins over the context; ls marks the selected one and never shows
// a token; use and rm change the selection.
func TestContexts(t *testing.T) {
	_, url := newAdmin(t, "s3cret")
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	for _, k := range []string{envServer, envAdmin, envToken, envAdminCA, envContext} {
		t.Setenv(k, "")
	}

	runCLI("context", "ls").want(t, 0, "no contexts", "")
	runCLI("context", "add", "site", "--admin", url, "--token", "s3cret").want(t, 0, "added context site (selected)", "")
	st, err := os.Stat(filepath.Join(cfg, "fibril", contextFileName))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the contexts file: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	runCLI("queue", "declare", "clicks").want(t, 0, "declared clicks", "")
	runCLI("queue", "ls").want(t, 0, "clicks", "")

	runCLI("context", "add", "lab", "--server", "127.0.0.2:7420").want(t, 0, "added context lab", "")
	r := runCLI("context", "ls")
	r.want(t, 0, "*  site", "")
	if !strings.Contains(r.stdout, "http://127.0.0.2:7421") || strings.Contains(r.stdout, "s3cret") {
		t.Fatalf("context ls:\n%s", r.stdout)
	}
	r = runCLI("context", "ls", "--json")
	var rows []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || len(rows) != 2 || strings.Contains(r.stdout, "s3cret") {
		t.Fatalf("context ls --json: %v\n%s", err, r.stdout)
	}

	t.Setenv(envContext, "lab")
	runCLI("queue", "ls").want(t, 1, "", "127.0.0.2:7421")
	runCLI("queue", "ls", "--admin", url, "--token", "s3cret").want(t, 0, "clicks", "")
	t.Setenv(envContext, "")

	runCLI("context", "use", "nope").want(t, 3, "", "no context \"nope\"")
	runCLI("context", "use", "lab").want(t, 0, "using context lab", "")
	runCLI("queue", "ls").want(t, 1, "", "127.0.0.2:7421")
	runCLI("context", "rm", "lab").want(t, 0, "removed context lab", "")
	r = runCLI("context", "ls")
	if strings.Contains(r.stdout, "*") || strings.Contains(r.stdout, "lab") {
		t.Fatalf("after removing the selected context:\n%s", r.stdout)
	}
	runCLI("context", "add", "bad name").want(t, 2, "", "context name")
}
