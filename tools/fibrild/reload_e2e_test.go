package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/internal/fibrildproc"
)

// TestReloadProcess: a real fibrild reads its config again at SIGHUP (what
// systemctl reload sends). New tokens take effect on the client protocol
// and the admin API alike and the old ones stop working; the log level
// changes live; a change that needs a restart is named in the log; a
// config that does not validate is refused whole and the daemon keeps
// what it had.
func TestReloadProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the fibrild binary")
	}
	bin := buildDaemon(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "fibril.toml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("[server]\ntokens = [\"old-token\"]\n[log]\nlevel = \"info\"\n")
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	p, err := fibrildproc.Start(ctx, fibrildproc.Options{Bin: bin, DataDir: filepath.Join(dir, "data"), Config: conf,
		Args: []string{"--storage.min_free", "0"}, StartTimeout: waitLimit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)

	dials := func(token string) bool {
		c, err := client.Dial(ctx, p.Addr, client.Options{Token: token, DisableReconnect: true})
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
	admin := func(token string) int {
		req, _ := http.NewRequestWithContext(ctx, "GET", p.Admin+"/api/queues", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	reload := func(what string) {
		t.Helper()
		n := strings.Count(p.Log(), "msg=\"reloading the config\"")
		if err := syscall.Kill(p.Pid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		await.Until(t, ctx, what, func() bool {
			l := p.Log()
			return strings.Count(l, "msg=\"reloading the config\"") > n &&
				strings.Count(l, "msg=\"config reloaded\"")+strings.Count(l, "msg=\"reload refused")+strings.Count(l, "reload refused:") > n
		})
	}
	if !dials("old-token") || admin("old-token") != http.StatusOK {
		t.Fatal("the start's token does not work")
	}

	write("[server]\ntokens = [\"new-token\"]\n[log]\nlevel = \"debug\"\n[storage]\nsegment_size = \"8MiB\"\n")
	reload("the new tokens and level")
	if dials("old-token") || admin("old-token") != http.StatusUnauthorized {
		t.Error("the old token still works after the reload")
	}
	if !dials("new-token") || admin("new-token") != http.StatusOK {
		t.Error("the new token does not work after the reload")
	}
	l := p.Log()
	if !strings.Contains(l, `level=DEBUG`) {
		t.Error("no debug line after the level went to debug")
	}
	if !strings.Contains(l, `take effect only at the next restart" sections=storage`) {
		t.Errorf("the segment size change is not named as waiting for a restart:\n%s", l)
	}

	// An uplink added, then removed, by reloads: it runs from the reload
	// on (here backing off: nothing listens where it points) and stops.
	uplinks := func() []string {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", p.Admin+"/api/uplinks", nil)
		req.Header.Set("Authorization", "Bearer new-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v struct {
			Uplinks []struct {
				Name string `json:"name"`
			} `json:"uplinks"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, u := range v.Uplinks {
			names = append(names, u.Name)
		}
		return names
	}
	base := "[server]\ntokens = [\"new-token\"]\n[log]\nlevel = \"debug\"\n[storage]\nsegment_size = \"8MiB\"\n"
	write(base + "[[uplink]]\nname = \"to-hq\"\nqueues = [\"sensors\"]\nto = [\"127.0.0.1:1\"]\n")
	reload("an uplink added")
	if got := uplinks(); !slices.Equal(got, []string{"to-hq"}) {
		t.Errorf("after a reload that adds an uplink, /api/uplinks lists %v", got)
	}
	write(base)
	reload("the uplink removed")
	if got := uplinks(); len(got) != 0 {
		t.Errorf("after a reload that removes the uplink, /api/uplinks lists %v", got)
	}

	write("[server]\ntokens = [\"third-token\"]\n[log]\nlevel = \"loud\"\n")
	reload("a config that does not validate")
	if !strings.Contains(p.Log(), "reload refused") {
		t.Errorf("a bad level was not refused:\n%s", p.Log())
	}
	if dials("third-token") || !dials("new-token") {
		t.Error("a refused reload changed the tokens")
	}
	if err := p.Stop(waitLimit); err != nil {
		t.Fatalf("stop after the reloads: %v\n%s", err, p.Log())
	}
}
