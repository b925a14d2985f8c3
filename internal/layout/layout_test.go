// Package layout holds the import-rule test: the "may import" table of the
// design (DESIGN.md, "Layout") as code. It has no code of its own.
package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/fibril-edge/fibril"

// rule says what the packages under one folder may import from this
// module, and which outside modules they must never pull in, directly or
// through anything they import.
type rule struct {
	prefix string   // a package path below the module, or a folder ending in "/"
	may    []string // module packages (or folders ending in "/") it may import
	never  []string // import paths no dependency of it may start with
}

// nothing of the cluster or the bridges in the solo broker's folder.
var clusterAndBridge = []string{
	"github.com/hashicorp/raft", "github.com/nats-io/",
	module + "/federation", module + "/bridge", module + "/tools",
}

// rules, most specific first: the first rule whose prefix matches a
// package is the one it is held to.
var rules = []rule{
	{prefix: "wal", never: append([]string{module + "/appliance"}, clusterAndBridge...)},
	{prefix: "appliance/wire"},
	{prefix: "appliance/client", may: []string{"appliance/wire"}, never: clusterAndBridge},
	{prefix: "appliance/", may: []string{"wal", "appliance", "appliance/", "internal/pebblesched", "internal/preauth", "internal/bearer"}, never: clusterAndBridge},
	{prefix: "appliance", may: []string{"wal", "appliance/wire", "internal/pebblesched"}, never: clusterAndBridge},
	// Uplinks run beside any broker, as the bridge does: the client API only.
	{prefix: "federation/uplink", may: []string{"appliance/client", "appliance/wire"},
		never: []string{module + "/bridge", module + "/tools", "github.com/nats-io/", "github.com/hashicorp/raft"}},
	{prefix: "federation/", may: []string{"wal", "appliance", "appliance/", "federation", "federation/", "internal/pebblesched"},
		never: []string{module + "/bridge", module + "/tools", "github.com/nats-io/"}},
	{prefix: "federation", may: []string{"wal", "appliance", "appliance/", "federation/", "internal/preauth"},
		never: []string{module + "/bridge", module + "/tools", "github.com/nats-io/"}},
	{prefix: "bridge", may: []string{"appliance/client", "appliance/wire"},
		never: []string{module + "/federation", module + "/tools", "github.com/hashicorp/raft"}},
	// Shared test helpers: the solo broker's pieces only, and the loopback
	// port picker the process harnesses share.
	{prefix: "internal/", may: []string{"wal", "appliance", "appliance/", "internal/loopback"}, never: clusterAndBridge},
	{prefix: "packaging/"},
	{prefix: "tools/", may: []string{""}}, // the composition root and the binaries: everything
}

// pkg is what `go list -json` says of one package.
type pkg struct {
	ImportPath   string
	Imports      []string
	Deps         []string
	TestImports  []string
	XTestImports []string
}

func TestImportRules(t *testing.T) {
	pkgs := list(t)
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages; expected the whole module", len(pkgs))
	}
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		r, ok := ruleFor(rel)
		if !ok {
			t.Errorf("%s: no rule in the layout table; add one (and a row to DESIGN.md's table)", rel)
			continue
		}
		for _, imp := range p.Imports {
			if bad := violates(r, imp); bad != "" {
				t.Errorf("%s imports %s: %s", rel, imp, bad)
			}
		}
		// Tests may reach further (a client test runs a real broker), but
		// never into what the folder must build and test without.
		for _, imp := range append(append([]string(nil), p.TestImports...), p.XTestImports...) {
			for _, n := range r.never {
				if strings.HasPrefix(imp, n) {
					t.Errorf("%s (tests) import %s: the layout forbids %s*", rel, imp, n)
				}
			}
		}
		for _, dep := range p.Deps {
			for _, n := range r.never {
				if strings.HasPrefix(dep, n) {
					t.Errorf("%s depends on %s (through its imports); the layout forbids %s*", rel, dep, n)
				}
			}
		}
	}
}

// TestRulesCatchAViolation checks the checker: the cluster imported by
// the admin API, or the broker imported by the log, is reported.
func TestRulesCatchAViolation(t *testing.T) {
	for _, c := range []struct{ from, imp string }{
		{"appliance/admin", module + "/federation"},
		{"appliance", module + "/appliance/server"},
		{"wal", module + "/appliance"},
		{"bridge", module + "/federation/control"},
		{"appliance/client", module + "/appliance"},
	} {
		r, ok := ruleFor(c.from)
		if !ok {
			t.Fatalf("%s: no rule", c.from)
		}
		if violates(r, c.imp) == "" {
			t.Errorf("%s importing %s passed the rules", c.from, c.imp)
		}
	}
	r, _ := ruleFor("federation")
	if bad := violates(r, module+"/appliance/admin"); bad != "" {
		t.Errorf("federation filling the admin API's views was refused: %s", bad)
	}
}

func ruleFor(rel string) (rule, bool) {
	for _, r := range rules {
		if rel == r.prefix || (strings.HasSuffix(r.prefix, "/") && strings.HasPrefix(rel, r.prefix)) {
			return r, true
		}
	}
	return rule{}, false
}

// violates says why importing imp breaks r, or "" when it may.
func violates(r rule, imp string) string {
	for _, n := range r.never {
		if strings.HasPrefix(imp, n) {
			return "the layout forbids " + n + "*"
		}
	}
	if !strings.HasPrefix(imp, module+"/") {
		return "" // stdlib and outside modules: only the never list applies
	}
	rel := strings.TrimPrefix(imp, module+"/")
	for _, m := range r.may {
		if m == "" || rel == m || (strings.HasSuffix(m, "/") && strings.HasPrefix(rel, m)) {
			return ""
		}
	}
	return "not in its may-import list " + strings.Join(r.may, ", ")
}

// list runs `go list -json` over the module with test imports.
func list(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "-test=false", module+"/...")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(&out)
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}
