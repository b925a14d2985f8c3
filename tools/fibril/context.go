package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"
)

// Contexts: named connection settings, as nats context keeps them. A
// context names fibrild's client protocol address, its admin API, the
// token and the admin API's CA; "fibril context use NAME" selects one,
// and every command then takes its connection defaults from it. A flag
// wins over the environment, which wins over the context, which wins
// over the built-in defaults. FIBRIL_CONTEXT names a context for one
// command without selecting it.

const (
	envContext = "FIBRIL_CONTEXT"
	// contextFileName is the file under the config directory
	// ($XDG_CONFIG_HOME/fibril, else ~/.config/fibril). It may hold
	// tokens, so it is written 0600.
	contextFileName = "contexts.json"
	// defaultAdminPort is the admin API's port a context's --admin is
	// derived with when only its server is given.
	defaultAdminPort = "7421"
)

// cliContext is one context's settings; "" leaves the default.
type cliContext struct {
	Server  string `json:"server,omitempty"`
	Admin   string `json:"admin,omitempty"`
	Token   string `json:"token,omitempty"`
	AdminCA string `json:"admin_ca,omitempty"`
}

// contextFile is the file's content.
type contextFile struct {
	Current  string                `json:"current,omitempty"`
	Contexts map[string]cliContext `json:"contexts"`
}

func contextPath() (string, error) {
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("contexts: no config directory: %w", err)
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "fibril", contextFileName), nil
}

// loadContexts reads the contexts file; a missing file is no contexts.
func loadContexts() (contextFile, string, error) {
	path, err := contextPath()
	if err != nil {
		return contextFile{}, "", err
	}
	f := contextFile{Contexts: map[string]cliContext{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return f, path, nil
	}
	if err != nil {
		return f, path, fmt.Errorf("contexts: %w", err)
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return f, path, fmt.Errorf("contexts: %s: %w", path, err)
	}
	if f.Contexts == nil {
		f.Contexts = map[string]cliContext{}
	}
	return f, path, nil
}

// save writes the file whole, 0600, through a rename.
func (f contextFile) save(path string) error {
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("contexts: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("contexts: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("contexts: %w", err)
	}
	return nil
}

// activeContext is the context the connection defaults come from:
// FIBRIL_CONTEXT's, else the selected one; zero when there is none. A
// context file that cannot be read is reported on stderr once and
// ignored, so that a broken file does not stop a command given flags.
func activeContext() cliContext {
	f, path, err := loadContexts()
	if err != nil {
		fmt.Fprintf(os.Stderr, "fibril: %v (ignored)\n", err)
		return cliContext{}
	}
	name := envOr(envContext, f.Current)
	if name == "" {
		return cliContext{}
	}
	c, ok := f.Contexts[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "fibril: context %q is not in %s (ignored)\n", name, path)
	}
	return c
}

// deriveAdmin is the admin API URL on the host of server's first address,
// at the admin API's default port; "" when server names none.
func deriveAdmin(server string) string {
	first, _, _ := strings.Cut(server, ",")
	host, _, err := net.SplitHostPort(strings.TrimSpace(first))
	if err != nil || host == "" {
		return ""
	}
	return "http://" + net.JoinHostPort(host, defaultAdminPort)
}

// firstNonEmpty returns the first non-empty value.
func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

const contextHelp = `Usage: fibril context add NAME [--server ADDR] [--admin URL] [--token T] [--admin-ca FILE] [--use]
       fibril context use NAME
       fibril context ls [--json]
       fibril context rm NAME

Named connection settings, kept in $XDG_CONFIG_HOME/fibril/contexts.json
(else ~/.config/fibril), mode 0600 since it may hold tokens. The selected
context (context use), or the one FIBRIL_CONTEXT names, gives every command
its defaults: flags win over the environment (FIBRIL_SERVER, FIBRIL_ADMIN,
FIBRIL_TOKEN, FIBRIL_ADMIN_CA), which wins over the context. A context
with a server and no admin URL reaches the admin API on the server's host,
port 7421.
`

// runContextAdd is "fibril context add".
func runContextAdd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("fibril context add", pflag.ContinueOnError)
	var c cliContext
	fs.StringVarP(&c.Server, "server", "s", "", "fibrild's client protocol address, or a cluster's nodes, comma-separated")
	fs.StringVar(&c.Admin, "admin", "", "fibrild's admin HTTP API, http:// or https:// (default: the server's host, port 7421)")
	fs.StringVar(&c.Token, "token", "", "auth token")
	fs.StringVar(&c.AdminCA, "admin-ca", "", "CA certificate (PEM file) of an https:// admin API")
	use := fs.Bool("use", false, "select it as well")
	if done, err := parseFlags(fs, contextHelp, args, stdout); done || err != nil {
		return err
	}
	if err := wantArgs(fs, 1, 1, "NAME"); err != nil {
		return err
	}
	name := fs.Arg(0)
	if err := validContextName(name); err != nil {
		return err
	}
	if c.AdminCA != "" {
		abs, err := filepath.Abs(c.AdminCA)
		if err != nil {
			return err
		}
		c.AdminCA = abs
	}
	f, path, err := loadContexts()
	if err != nil {
		return err
	}
	_, existed := f.Contexts[name]
	f.Contexts[name] = c
	if *use || f.Current == "" {
		f.Current = name
	}
	if err := f.save(path); err != nil {
		return err
	}
	verb := "added"
	if existed {
		verb = "replaced"
	}
	fmt.Fprintf(stdout, "%s context %s", verb, name)
	if f.Current == name {
		fmt.Fprint(stdout, " (selected)")
	}
	fmt.Fprintln(stdout)
	return nil
}

func validContextName(name string) error {
	if name == "" || strings.ContainsAny(name, " \t\n/") {
		return usagef("context name %q: want a non-empty word without spaces or slashes", name)
	}
	return nil
}

// runContextUse is "fibril context use".
func runContextUse(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return changeContexts("use", args, stdout, func(f *contextFile, name string) string {
		f.Current = name
		return "using context " + name
	})
}

// runContextRm is "fibril context rm".
func runContextRm(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return changeContexts("rm", args, stdout, func(f *contextFile, name string) string {
		delete(f.Contexts, name)
		if f.Current == name {
			f.Current = ""
		}
		return "removed context " + name
	})
}

// changeContexts runs "fibril context VERB NAME": it applies change to
// the file, for a context that exists, saves it and prints what change
// says it did.
func changeContexts(verb string, args []string, stdout io.Writer, change func(f *contextFile, name string) string) error {
	fs := pflag.NewFlagSet("fibril context "+verb, pflag.ContinueOnError)
	if done, err := parseFlags(fs, contextHelp, args, stdout); done || err != nil {
		return err
	}
	if err := wantArgs(fs, 1, 1, "NAME"); err != nil {
		return err
	}
	name := fs.Arg(0)
	f, path, err := loadContexts()
	if err != nil {
		return err
	}
	if _, ok := f.Contexts[name]; !ok {
		return withExit(exitNotFound, fmt.Errorf("no context %q (fibril context ls lists them)", name))
	}
	did := change(&f, name)
	if err := f.save(path); err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, did)
	return err
}

// runContextLs is "fibril context ls": every context, the selected one
// marked, tokens never shown.
func runContextLs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("fibril context ls", pflag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON (tokens left out)")
	if done, err := parseFlags(fs, contextHelp, args, stdout); done || err != nil {
		return err
	}
	if err := wantArgs(fs, 0, 0, ""); err != nil {
		return err
	}
	f, _, err := loadContexts()
	if err != nil {
		return err
	}
	names := make([]string, 0, len(f.Contexts))
	for n := range f.Contexts {
		names = append(names, n)
	}
	slices.Sort(names)
	type row struct {
		Name     string `json:"name"`
		Selected bool   `json:"selected"`
		Server   string `json:"server"`
		Admin    string `json:"admin"`
		Token    bool   `json:"token"`
		AdminCA  string `json:"admin_ca,omitempty"`
	}
	rows := make([]row, 0, len(names))
	for _, n := range names {
		c := f.Contexts[n]
		rows = append(rows, row{Name: n, Selected: n == f.Current, Server: firstNonEmpty(c.Server, defaultServer),
			Admin: firstNonEmpty(c.Admin, deriveAdmin(c.Server), defaultAdmin), Token: c.Token != "", AdminCA: c.AdminCA})
	}
	if *asJSON {
		return writeJSON(stdout, rows)
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintln(stdout, "no contexts: fibril context add NAME --server HOST:PORT --token …")
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\tNAME\tSERVER\tADMIN\tTOKEN")
	for _, r := range rows {
		mark, tok := "", "no"
		if r.Selected {
			mark = "*"
		}
		if r.Token {
			tok = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", mark, r.Name, r.Server, r.Admin, tok)
	}
	return tw.Flush()
}
