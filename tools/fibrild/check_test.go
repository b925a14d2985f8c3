package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	private := write("tokens", "# admin\ns3cret\n")
	open := write("open-tokens", "s3cret\n")
	if err := os.Chmod(open, 0o644); err != nil {
		t.Fatal(err)
	}
	empty := write("empty-tokens", "# none yet\n")
	for _, tc := range []struct {
		name, text string
		code       int
		want       []string // lines of stderr, in order, with dir left out
	}{
		{"empty.toml", "", 0, nil},
		{"comments.toml", "# every line commented\n# [storage]\n# data_dir = \"/var/lib/fibril\"\n", 0, nil},
		{"good.toml", "[server]\nlisten = \"0.0.0.0:7420\"\ntokens = [\"t\"]\n[storage]\ndata_dir = \"/var/lib/fibril\"\n", 0, nil},
		{"bad.toml", "# comment\n[server]\nlisten = \"nohostport\"\nlistn = \"x\"\nmax_frame = \"1KiB\"\n\n[sever]\nlisten = \"x\"\n[log]\nlevel = \"loud\"\nformat = 7\n", 2, []string{
			"bad.toml:3: server.listen: \"nohostport\" is not a host:port address",
			"bad.toml:4: server.listn: unknown key",
			"bad.toml:5: server.max_frame: 1KiB is out of range",
			"bad.toml:8: sever.listen: unknown key",
			"bad.toml:10: log.level: \"loud\"",
			"bad.toml:11: log.format: cannot decode TOML integer",
		}},
		{"open.toml", "[server]\nlisten = \"0.0.0.0:7420\"\n[admin]\nlisten = \"0.0.0.0:7421\"\n[cluster]\nlisten = \"0.0.0.0:7422\"\nbootstrap = true\n", 2, []string{
			"open.toml:2: server.listen: 0.0.0.0:7420 is off loopback",
			"open.toml:4: admin.listen: 0.0.0.0:7421 is off loopback",
			"open.toml:6: cluster.listen: 0.0.0.0:7422 is off loopback",
		}},
		{"insecure.toml", "[server]\nlisten = \"0.0.0.0:7420\"\ninsecure = true\n[admin]\nlisten = \"0.0.0.0:7421\"\ninsecure = true\n[cluster]\nlisten = \"0.0.0.0:7422\"\nbootstrap = true\ninsecure = true\n", 0, nil},
		{"syntax.toml", "[server]\nlisten = \"unterminated\ntokens = []\n", 2, []string{"syntax.toml:2: syntax error"}},
		{"twice.toml", "[server]\nlisten = \"a:1\"\nlisten = \"b:2\"\n", 2, []string{"twice.toml:3: key listen is already defined"}},
		{"tokensfile.toml", "[server]\ntokens_file = \"" + private + "\"\n[admin]\nlisten = \"0.0.0.0:7421\"\n", 0, nil},
		{"opentokens.toml", "[server]\n\ntokens_file = \"" + open + "\"\n", 2, []string{
			"opentokens.toml:3: server.tokens_file: open-tokens is readable by every user of the machine (mode 0644)"}},
		{"notokens.toml", "[server]\ntokens_file = \"" + filepath.Join(dir, "absent") + "\"\n", 2, []string{
			"notokens.toml:2: server.tokens_file: read tokens: open absent: no such file"}},
		{"emptytokens.toml", "[server]\ntokens_file = \"" + empty + "\"\n", 2, []string{
			"emptytokens.toml:2: server.tokens_file: empty-tokens holds no token"}},
		{"limits.toml", "[server]\nmax_pre_hello = 16\nmax_pre_hello_per_source = 64\npressure_hello_timeout = \"1m\"\ndelivery_budget = \"1KiB\"\nslow_consumer_grace = \"0s\"\n", 2, []string{
			"limits.toml:3: server.max_pre_hello_per_source: 64 is out of range (1 to max_pre_hello, 16)",
			"limits.toml:4: server.pressure_hello_timeout: 1m0s is out of range",
			"limits.toml:5: server.delivery_budget: 1KiB is below 64KiB",
			"limits.toml:6: server.slow_consumer_grace: 0s is out of range"}},
		{"admintls.toml", "[admin]\ntls_cert = \"cert.pem\"\nmax_connections = 0\n", 2, []string{
			"admintls.toml:2: admin.tls_cert: tls_cert and tls_key go together",
			"admintls.toml:3: admin.max_connections: 0 is out of range"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := write(tc.name, tc.text)
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), []string{"--check-config", path}, &stdout, &stderr)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr.String())
			}
			if code == 0 {
				if !strings.Contains(stdout.String(), ": ok") {
					t.Fatalf("stdout %q", stdout.String())
				}
				want := 0
				if tc.name == "insecure.toml" { // valid, and all three listeners insecure by choice
					want = 3
				}
				if insecure := strings.Count(stdout.String(), "INSECURE"); insecure != want {
					t.Fatalf("stdout names %d INSECURE settings, want %d:\n%s", insecure, want, stdout.String())
				}
				return
			}
			got := strings.Split(strings.TrimSpace(strings.ReplaceAll(stderr.String(), dir+string(filepath.Separator), "")), "\n")
			for i, w := range tc.want {
				if i >= len(got) || !strings.HasPrefix(got[i], w) {
					t.Fatalf("stderr line %d: want prefix %q; got:\n%s", i+1, w, strings.Join(got, "\n"))
				}
			}
			if last := got[len(got)-1]; !strings.Contains(last, "problem(s)") {
				t.Fatalf("no summary line: %q", last)
			}
		})
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"--check-config", filepath.Join(dir, "absent.toml")}, &stdout, &stderr); code != 2 {
		t.Fatalf("missing file: exit %d", code)
	}
}
