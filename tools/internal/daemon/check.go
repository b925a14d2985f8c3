package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// Problem is one thing wrong with a config file.
type Problem struct {
	Line int    // 1-based line in the file; 0 when the file does not set the key
	Key  string // section.key, when the problem is about one key
	Msg  string
}

func (p Problem) String() string {
	var b strings.Builder
	if p.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", p.Line)
	}
	if p.Key != "" {
		fmt.Fprintf(&b, "%s: ", p.Key)
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Check validates a config file's contents strictly and returns every
// problem, in line order: a syntax error (which ends the check, since
// nothing after it can be read), each unknown key, each value of the
// wrong type, and each value out of range. An empty result means the file
// is valid: Parse accepts it and Validate passes. Check also reads
// [server] tokens_file, if set, as fibrild would at start (relative to the
// working directory), and reports one that is missing, unreadable,
// readable by every user, or holds no token.
func Check(data []byte) []Problem {
	entries, syntax := scanEntries(data)
	if syntax != nil {
		return []Problem{*syntax}
	}
	var problems []Problem
	lines := make(map[string]int, len(entries))
	cfg := Default()
	durations := durationKeys()
	for _, e := range entries {
		lines[e.key] = e.line
		if e.integer && durations[e.key] {
			// A bare number would be read as nanoseconds.
			problems = append(problems, Problem{Line: e.line, Key: e.key,
				Msg: "a bare number is not a duration: write it with its unit, such as \"10s\" or \"500ms\""})
			continue
		}
		// Decode the key alone over what the earlier keys set, so one bad
		// value does not hide the next.
		next := cfg
		if err := decodeRaw(e.doc, &next); err != nil {
			problems = append(problems, Problem{Line: e.line, Key: e.key, Msg: keyError(err)})
			continue
		}
		cfg = next
	}
	if len(problems) == 0 {
		// Whole-file rules the per-key passes cannot see, such as a key
		// set twice.
		if err := decodeRaw(data, new(Config)); err != nil {
			p := Problem{Msg: keyError(err)}
			var decodeErr *toml.DecodeError
			if errors.As(err, &decodeErr) {
				p.Line, _ = decodeErr.Position()
			}
			problems = append(problems, p)
		}
	}
	// Array tables ([[bridge.nats]]) do not decode key by key (each key
	// would open a table of its own): take them from the whole file.
	cfg.Bridge, cfg.Uplink = BridgeConfig{}, nil
	if full := Default(); decodeRaw(data, &full) == nil {
		cfg.Bridge, cfg.Uplink = full.Bridge, full.Uplink
	}
	// Under systemd the tokens may come from its credential alone, as
	// they do at the start (Run resolves them before it validates).
	if dir := os.Getenv("CREDENTIALS_DIRECTORY"); dir != "" {
		if resolved, err := cfg.ResolveTokens(dir); err == nil {
			cfg.Server.Tokens = resolved.Server.Tokens
		}
	}
	for _, p := range cfg.valueProblems() {
		p.Line = lines[p.Key]
		problems = append(problems, p)
	}
	if path := cfg.Server.TokensFile; path != "" {
		if _, err := readTokensFile(path); err != nil {
			problems = append(problems, Problem{Line: lines["server.tokens_file"], Key: "server.tokens_file", Msg: err.Error()})
		}
	}
	if cl := cfg.Cluster; cl.Enabled() && cl.TLSCert != "" && cl.TLSKey != "" && cl.TLSCA != "" {
		if _, _, err := clusterTLS(cl, cl.NodeID); err != nil {
			problems = append(problems, Problem{Line: lines["cluster.tls_cert"], Key: "cluster.tls_cert", Msg: err.Error()})
		}
	}
	sort.SliceStable(problems, func(i, j int) bool { return problems[i].Line < problems[j].Line })
	return problems
}

// entry is one key = value line of a config file, as a document of its
// own (under its table header) that decodes alone.
type entry struct {
	key     string
	line    int
	doc     []byte
	integer bool // the value is a bare TOML integer
}

// scanEntries lists a file's key/value expressions, or returns its syntax
// error.
func scanEntries(data []byte) ([]entry, *Problem) {
	var p unstable.Parser
	p.Reset(data)
	var header string // the current [table] line, as written
	var section []string
	var entries []entry
	for p.NextExpression() {
		n := p.Expression()
		switch n.Kind {
		case unstable.Table, unstable.ArrayTable:
			section = keyParts(n.Key())
			header = "[" + strings.Join(quoteParts(section), ".") + "]"
			if n.Kind == unstable.ArrayTable {
				header = "[" + header + "]"
			}
		case unstable.KeyValue:
			key := strings.Join(append(append([]string(nil), section...), keyParts(n.Key())...), ".")
			var doc bytes.Buffer
			if header != "" {
				doc.WriteString(header + "\n")
			}
			doc.Write(p.Raw(n.Raw))
			doc.WriteString("\n")
			entries = append(entries, entry{key: key, line: p.Shape(n.Raw).Start.Line, doc: doc.Bytes(),
				integer: n.Value().Kind == unstable.Integer})
		}
	}
	if err := p.Error(); err != nil {
		var perr *unstable.ParserError
		line := 0
		if errors.As(err, &perr) && len(perr.Highlight) > 0 {
			line = p.Shape(p.Range(perr.Highlight)).Start.Line
		}
		return nil, &Problem{Line: line, Msg: "syntax error: " + err.Error()}
	}
	return entries, nil
}

func keyParts(it unstable.Iterator) []string {
	var parts []string
	for it.Next() {
		parts = append(parts, string(it.Node().Data))
	}
	return parts
}

// quoteParts quotes the key parts that are not bare keys.
func quoteParts(parts []string) []string {
	out := make([]string, len(parts))
	for i, s := range parts {
		out[i] = s
		if s == "" || strings.IndexFunc(s, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
		}) >= 0 {
			b, _ := toml.Marshal(map[string]string{"k": s})
			out[i] = strings.TrimSpace(strings.TrimPrefix(string(b), "k = "))
		}
	}
	return out
}

// decodeRaw is decodeStrict without its error translation.
func decodeRaw(data []byte, c *Config) error {
	return toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields().Decode(c)
}

// keyError is decodeRaw's error for a one-key document, without the
// position (which is the mini document's, not the file's).
func keyError(err error) string {
	var missing *toml.StrictMissingError
	var decodeErr *toml.DecodeError
	switch {
	case errors.As(err, &missing):
		return "unknown key"
	case errors.As(err, &decodeErr):
		return strings.TrimPrefix(decodeErr.Error(), "toml: ")
	}
	return err.Error()
}

// durationKeys names the keys whose values are durations.
func durationKeys() map[string]bool {
	keys := map[string]bool{}
	walkKeys(reflect.ValueOf(Default()), func(name string, f reflect.StructField, _ reflect.Value) {
		if f.Type == reflect.TypeFor[Duration]() {
			keys[name] = true
		}
	})
	return keys
}

// Warnings lists what a valid config file allows only because it says
// insecure = true: the client port or the admin API off loopback without
// tokens, an uplink's token sent off loopback without TLS, and the cluster
// port off loopback without mutual TLS. fibrild logs each at every
// start; --check-config prints them. Line is the listen key's.
func Warnings(data []byte) []Problem {
	cfg, err := Parse(data)
	if err != nil {
		return nil
	}
	if dir := os.Getenv("CREDENTIALS_DIRECTORY"); dir != "" { // as Check and the start read them
		if resolved, err := cfg.ResolveTokens(dir); err == nil {
			cfg.Server.Tokens = resolved.Server.Tokens
		}
	}
	entries, _ := scanEntries(data)
	lines := make(map[string]int, len(entries))
	for _, e := range entries {
		lines[e.key] = e.line
	}
	var out []Problem
	if s := cfg.Server; !IsLoopback(s.Listen) && len(s.Tokens) == 0 && s.TokensFile == "" {
		out = append(out, Problem{Line: lines["server.listen"], Key: "server.listen",
			Msg: fmt.Sprintf("INSECURE: %s is off loopback without tokens ([server] insecure = true): anyone who reaches it can publish, read, ack and delete", s.Listen)})
	}
	if a := cfg.Admin; a.Listen != "" && !IsLoopback(a.Listen) && len(cfg.Server.Tokens) == 0 && cfg.Server.TokensFile == "" {
		out = append(out, Problem{Line: lines["admin.listen"], Key: "admin.listen",
			Msg: fmt.Sprintf("INSECURE: %s is off loopback without tokens ([admin] insecure = true): anyone who reaches it can read, publish, ack and delete", a.Listen)})
	}
	if cl := cfg.Cluster; cl.Listen != "" && !IsLoopback(cl.Listen) && cl.TLSCert == "" {
		out = append(out, Problem{Line: lines["cluster.listen"], Key: "cluster.listen",
			Msg: fmt.Sprintf("INSECURE: %s is off loopback without mutual TLS ([cluster] insecure = true): anyone who reaches it can join the cluster, read its data and delete its queues", cl.Listen)})
	}
	if full := Default(); decodeRaw(data, &full) == nil { // array tables: from the whole file, as Check reads them
		for _, u := range full.Uplink {
			if a := u.clearToken(); a != "" {
				out = append(out, Problem{Key: "uplink",
					Msg: fmt.Sprintf("INSECURE: uplink %s sends its token to %s without TLS ([[uplink]] insecure = true): anyone on the path can read it and publish upstream", u.Name, a)})
			}
		}
	}
	return out
}
