package daemon

import (
	"bytes"
	"strings"
	"testing"
)

// TestUplinkTables: --check-config reports a broken [[uplink]] by name, a
// good one passes, and the printed config never shows an uplink's token.
func TestUplinkTables(t *testing.T) {
	good := "[[uplink]]\nname = \"to-hq\"\nqueues = [\"sensors\", \"alarms-*\"]\nto = [\"hq1:7420\"]\nremote_queue = \"site7-{queue}\"\ntoken = \"s3cret\"\nsource = \"site7\"\n"
	for _, p := range Check([]byte(good)) {
		if p.Key == "uplink" {
			t.Fatalf("a good [[uplink]] reported: %+v", p)
		}
	}
	for name, bad := range map[string]string{
		"no to":             "[[uplink]]\nname = \"a\"\nqueues = [\"q\"]\n",
		"pattern, one name": "[[uplink]]\nname = \"b\"\nqueues = [\"q-*\"]\nto = [\"h:1\"]\nremote_queue = \"x\"\n",
		"missing ca":        "[[uplink]]\nname = \"c\"\nqueues = [\"q\"]\nto = [\"h:1\"]\ntls_ca = \"/nonexistent/ca.pem\"\n",
		"missing token":     "[[uplink]]\nname = \"d\"\nqueues = [\"q\"]\nto = [\"h:1\"]\ntoken_file = \"/nonexistent/token\"\n",
	} {
		var found bool
		for _, p := range Check([]byte(bad)) {
			found = found || p.Key == "uplink"
		}
		if !found {
			t.Errorf("%s: --check-config found nothing wrong", name)
		}
	}
	cfg := Default()
	cfg.Uplink = []UplinkConfig{{Name: "to-hq", Queues: []string{"q"}, To: []string{"h:1"}, Token: "s3cret"}}
	var out bytes.Buffer
	if err := cfg.WriteTOML(&out); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "s3cret") || !strings.Contains(out.String(), "[[uplink]]") {
		t.Fatalf("printed config:\n%s", out.String())
	}
	if cfg.Uplink[0].Token != "s3cret" {
		t.Fatal("printing the config changed the uplink's token")
	}
}
