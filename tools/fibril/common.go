package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/fibril-edge/fibril/appliance/client"
)

// Exit statuses. printUsage lists them for the operator.
const (
	exitOK       = 0
	exitFailure  = 1
	exitUsage    = 2
	exitNotFound = 3
	exitConflict = 4
)

// Defaults of the connection flags and their environment variables.
const (
	defaultServer = "127.0.0.1:7420"
	defaultAdmin  = "http://127.0.0.1:7421"
	envServer     = "FIBRIL_SERVER"
	envAdmin      = "FIBRIL_ADMIN"
	envToken      = "FIBRIL_TOKEN"
	envAdminCA    = "FIBRIL_ADMIN_CA"
)

// exitError carries an exit status other than 1 for a failure.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// withExit gives err the exit status code.
func withExit(code int, err error) error { return &exitError{code: code, err: err} }

// exitCode is the status err asks for: 3 for something not found, 4 for
// a conflict, else 1.
func exitCode(err error) int {
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, client.ErrNotFound):
		return exitNotFound
	case errors.Is(err, client.ErrConflict):
		return exitConflict
	}
	return exitFailure
}

// connFlags are the flags of the commands that talk to fibrild.
type connFlags struct {
	server, admin, token string
	adminCA              string // PEM file of the CA an https:// --admin is checked against
	json                 bool
}

// addServerFlags registers --server, --token and --json, their defaults
// from the environment, else the active context (context.go).
func (c *connFlags) addServerFlags(fs *pflag.FlagSet) {
	cx := activeContext()
	fs.StringVarP(&c.server, "server", "s", firstNonEmpty(os.Getenv(envServer), cx.Server, defaultServer),
		"fibrild's client protocol address, or a comma-separated list of a cluster's nodes, tried in turn (env "+envServer+")")
	fs.StringVar(&c.token, "token", firstNonEmpty(os.Getenv(envToken), cx.Token), "auth token (env "+envToken+")")
	fs.BoolVar(&c.json, "json", false, "print JSON, one object per line")
}

// addAdminFlags registers --admin, --admin-ca, --token and --json, their
// defaults from the environment, else the active context; without an
// admin URL from either, the admin API is looked for on the host of the
// server they name, port 7421.
func (c *connFlags) addAdminFlags(fs *pflag.FlagSet) {
	cx := activeContext()
	admin := firstNonEmpty(os.Getenv(envAdmin), cx.Admin, deriveAdmin(firstNonEmpty(os.Getenv(envServer), cx.Server)), defaultAdmin)
	fs.StringVar(&c.admin, "admin", admin, "fibrild's admin HTTP API, http:// or https:// (env "+envAdmin+")")
	fs.StringVar(&c.adminCA, "admin-ca", firstNonEmpty(os.Getenv(envAdminCA), cx.AdminCA),
		"CA certificate (PEM file) that signed an https:// --admin's certificate, trusted instead of the system's roots (env "+envAdminCA+")")
	fs.StringVar(&c.token, "token", firstNonEmpty(os.Getenv(envToken), cx.Token), "auth token (env "+envToken+")")
	fs.BoolVar(&c.json, "json", false, "print JSON")
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// dial connects to fibrild over the client protocol, failing at once
// (no reconnecting) with advice when it cannot. --server may list several
// addresses (a cluster's nodes): they are tried in order, each within the
// dial timeout, and the first that answers is used.
func (c *connFlags) dial(ctx context.Context) (*client.Client, error) {
	cl, err := client.Dial(ctx, c.server, client.Options{
		Token:            c.token,
		ClientName:       "fibril-cli",
		DialTimeout:      5 * time.Second,
		DisableReconnect: true,
		Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return nil, serverError(c.server, err)
	}
	return cl, nil
}

// serverError explains a failure to talk to fibrild at addr (one
// address or a list; the client's error then says what each one did). A
// refused token or protocol version is named before an unreachable node:
// with a list, that is the advice that helps.
func serverError(addr string, err error) error {
	var op *net.OpError
	switch {
	case errors.Is(err, client.ErrUnauthorized):
		return fmt.Errorf("fibrild at %s refused the token: pass --token or set %s: %w", addr, envToken, err)
	case errors.Is(err, client.ErrUnsupportedVersion):
		return fmt.Errorf("fibrild at %s speaks another protocol version: use a fibril CLI of the same release: %w", addr, err)
	case errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &op):
		where := addr
		if strings.Contains(addr, ",") {
			where = "any of " + addr
		}
		return fmt.Errorf("cannot reach fibrild at %s: is it running? start it with `make run` or `systemctl start fibril`, or point --server (env %s) at it: %w", where, envServer, err)
	}
	return err
}

// writeJSON prints v as one line of JSON.
func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// parseFlags parses args with fs, turning --help into a nil error with
// done set and any other mistake into a usageError.
func parseFlags(fs *pflag.FlagSet, help string, args []string, stdout io.Writer) (done bool, err error) {
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprint(stdout, help)
			fmt.Fprintf(stdout, "\nFlags:\n%s", fs.FlagUsages())
			return true, nil
		}
		return false, usagef("%v", err)
	}
	return false, nil
}

// wantArgs checks the count of positional arguments.
func wantArgs(fs *pflag.FlagSet, min, max int, names string) error {
	n := fs.NArg()
	if n < min || (max >= 0 && n > max) {
		if n < min {
			return usagef("missing %s", names)
		}
		return usagef("unexpected argument %q", fs.Arg(max))
	}
	return nil
}

// printable returns b as text when it is valid UTF-8 without control
// characters other than tab, else quoted.
func printable(b []byte) string {
	s := string(b)
	if strings.IndexFunc(s, func(r rune) bool { return r == 0xfffd || (r < 0x20 && r != '\t') || r == 0x7f }) < 0 {
		return s
	}
	return fmt.Sprintf("%q", b)
}

// adminArgs finishes an admin command's command line: it adds the
// connection flags, parses args (done is true when help was printed), checks
// the argument count and returns the admin API client.
func adminArgs(fs *pflag.FlagSet, conn *connFlags, help string, args []string, stdout io.Writer,
	minArgs, maxArgs int, names string) (api *adminClient, done bool, err error) {
	conn.addAdminFlags(fs)
	if done, err := parseFlags(fs, help, args, stdout); done || err != nil {
		return nil, done, err
	}
	if err := wantArgs(fs, minArgs, maxArgs, names); err != nil {
		return nil, false, err
	}
	api, err = conn.adminClient()
	return api, false, err
}
