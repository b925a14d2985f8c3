package daemon

import (
	"bytes"
	"strings"
	"testing"
)

// TestUplinkTables: --check-config reports a broken [[uplink]] by name, a
// good one passes, and the printed config never shows an uplink's token.
func TestUplinkTables(t *testing.T) {
	good := "[[uplink]]\nname = \"to-hq\"\nqueues = [\"sensors\", \"alarms-*\"]\nto = [\"hq1:7420\"]\nremote_queue = \"site7-{queue}\"\ntoken = \"s3cret\"\nsource = \"site7\"\ninsecure = true\n"
	for _, p := range Check([]byte(good)) {
		if p.Key == "uplink" {
			t.Fatalf("a good [[uplink]] reported: %+v", p)
		}
	}
	for name, bad := range map[string]string{
		"no to":              "[[uplink]]\nname = \"a\"\nqueues = [\"q\"]\n",
		"pattern, one name":  "[[uplink]]\nname = \"b\"\nqueues = [\"q-*\"]\nto = [\"h:1\"]\nremote_queue = \"x\"\n",
		"missing ca":         "[[uplink]]\nname = \"c\"\nqueues = [\"q\"]\nto = [\"h:1\"]\ntls_ca = \"/nonexistent/ca.pem\"\n",
		"missing token":      "[[uplink]]\nname = \"d\"\nqueues = [\"q\"]\nto = [\"h:1\"]\ntoken_file = \"/nonexistent/token\"\n",
		"token in the clear": "[[uplink]]\nname = \"e\"\nqueues = [\"q\"]\nto = [\"127.0.0.1:1\", \"hq1:7420\"]\ntoken = \"s3cret\"\n",
	} {
		var found bool
		for _, p := range Check([]byte(bad)) {
			found = found || p.Key == "uplink"
		}
		if !found {
			t.Errorf("%s: --check-config found nothing wrong", name)
		}
	}
	// A token goes off loopback only over TLS, unless insecure = true says
	// otherwise (and then every start and --check-config warn).
	clear := "[[uplink]]\nname = \"e\"\nqueues = [\"q\"]\nto = [\"127.0.0.1:1\", \"hq1:7420\"]\ntoken = \"s3cret\"\n"
	if p := Check([]byte(clear)); len(p) != 1 || !strings.Contains(p[0].Msg, "in the clear to hq1:7420") {
		t.Errorf("a token sent in the clear: %+v", p)
	}
	if p := Check([]byte(clear + "insecure = true\n")); len(p) != 0 {
		t.Errorf("a token sent in the clear by choice: %+v", p)
	}
	if w := Warnings([]byte(clear + "insecure = true\n")); len(w) != 1 || !strings.Contains(w[0].Msg, "INSECURE: uplink e sends its token to hq1:7420") {
		t.Errorf("no warning for a token sent in the clear by choice: %+v", w)
	}
	local := "[[uplink]]\nname = \"f\"\nqueues = [\"q\"]\nto = [\"localhost:7420\", \"[::1]:7420\"]\ntoken = \"s3cret\"\n"
	if p, w := Check([]byte(local)), Warnings([]byte(local)); len(p) != 0 || len(w) != 0 {
		t.Errorf("a token kept on loopback: problems %+v, warnings %+v", p, w)
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
