// Command fibrild is the Fibril broker daemon: it reads fibril.toml,
// serves the client protocol on top of the queue engine, shuts down
// cleanly on SIGTERM or SIGINT (a second signal exits at once), and reads
// its config again on SIGHUP (systemctl reload): tokens and the log level
// change live, other changes wait for a restart (the log says which).
//
//	fibrild [--config PATH] [--print-config] [--version] [--section.key VALUE ...]
//	fibrild --check-config FILE
//
// Without --config it reads /etc/fibril/fibril.toml if that exists, else
// runs on the built-in default (127.0.0.1:7420, data under ./data). Every
// config key is also a flag (--server.listen, --storage.data_dir,
// --log.level, ...) that overrides the file.
//
// --check-config validates a file strictly (unknown keys, wrong types and
// values out of range are errors) and prints every problem with its line.
//
// Exit status: 0 after a clean shutdown, 1 on an error while running, 2 on
// bad flags or config.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/fibril-edge/fibril/tools/internal/daemon"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		cancel(fmt.Errorf("signal %v", s))
		s = <-sigs
		fmt.Fprintf(os.Stderr, "fibrild: second signal (%v): exiting without a clean shutdown\n", s)
		os.Exit(1)
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is fibrild's body; it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	flags := pflag.NewFlagSet("fibrild", pflag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.SortFlags = false
	configPath := flags.String("config", "", "config file (default "+daemon.DefaultConfigPath+" if it exists, else the built-in default)")
	printConfig := flags.Bool("print-config", false, "print the effective config as TOML (tokens redacted) and exit")
	showVersion := flags.Bool("version", false, "print the version and exit")
	checkConfig := flags.String("check-config", "", "validate the config `FILE` strictly, report every problem with its line, and exit (0: valid, 2: not)")
	overrides := make(map[string]*string)
	for _, k := range daemon.Keys() {
		overrides[k.Name] = flags.String(k.Name, k.Default, k.Help)
	}
	flags.Usage = func() {
		fmt.Fprintf(stderr, "Usage: fibrild [flags]\n\nThe Fibril broker daemon. Flags named section.key override that key of the config file.\nSet GOMEMLIMIT (e.g. GOMEMLIMIT=256MiB) to bound the Go heap.\n\n")
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "fibrild: %v\nRun fibrild --help for the flags.\n", err)
		return 2
	}
	if flags.NArg() > 0 {
		fmt.Fprintf(stderr, "fibrild: unexpected argument %q\n", flags.Arg(0))
		return 2
	}
	if *showVersion {
		fmt.Fprintf(stdout, "fibrild %s\n", version)
		return 0
	}
	if flags.Changed("check-config") {
		return checkConfigFile(*checkConfig, stdout, stderr)
	}

	// read reads the config: the file (or the default), then the flags
	// over it. A reload reads it the same way.
	read := func() (daemon.Config, string, error) {
		cfg, source, err := loadConfig(*configPath, flags.Changed("config"))
		if err != nil {
			return cfg, source, err
		}
		for _, k := range daemon.Keys() {
			if flags.Changed(k.Name) {
				if err := cfg.Set(k.Name, *overrides[k.Name]); err != nil {
					return cfg, source, fmt.Errorf("--%w", err)
				}
			}
		}
		return cfg, source, nil
	}
	cfg, source, err := read()
	if err != nil {
		fmt.Fprintf(stderr, "fibrild: %v\n", err)
		return 2
	}
	// Validate with the tokens of tokens_file and of the systemd
	// credential, as Run will; print the config as it was given.
	resolved, err := cfg.ResolveTokens(os.Getenv("CREDENTIALS_DIRECTORY"))
	if err != nil {
		fmt.Fprintf(stderr, "fibrild: %s: %v\n", source, err)
		return 2
	}
	if err := resolved.Validate(); err != nil {
		fmt.Fprintf(stderr, "fibrild: %s: %v\n", source, err)
		return 2
	}
	if *printConfig {
		if err := cfg.WriteTOML(stdout); err != nil {
			fmt.Fprintf(stderr, "fibrild: %v\n", err)
			return 1
		}
		return 0
	}

	log, level, err := daemon.NewReloadableLogger(cfg.Log, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "fibrild: %v\n", err)
		return 2
	}
	log.Info("fibrild starting", "version", version, "config", source)
	daemon.Version = version
	// SIGHUP (systemctl reload) reads the config again; the daemon applies
	// what can change live (daemon.Reload).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	configs := make(chan daemon.Config)
	go func() {
		for {
			select {
			case <-hup:
			case <-ctx.Done():
				return
			}
			next, source, err := read()
			if err != nil {
				log.Error("reload refused: the config cannot be read; running on the previous one", "config", source, "err", err)
				continue
			}
			log.Info("reloading the config", "config", source)
			select {
			case configs <- next:
			case <-ctx.Done():
				return
			}
		}
	}()
	if err := daemon.RunReloading(ctx, cfg, log, daemon.Reload{Configs: configs, Level: level}); err != nil {
		log.Error("fibrild failed", "err", err)
		return 1
	}
	return 0
}

// checkConfigFile validates a config file and prints its problems as
// FILE:LINE: key: message, one a line. It returns the exit status.
func checkConfigFile(path string, stdout, stderr io.Writer) int {
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintf(stderr, "fibrild: %v\n", err)
		return 2
	}
	problems := daemon.Check(data)
	for _, p := range problems {
		loc := path
		if p.Line > 0 {
			loc = fmt.Sprintf("%s:%d", path, p.Line)
		}
		p.Line = 0
		fmt.Fprintf(stderr, "%s: %v\n", loc, p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(stderr, "fibrild: %s: %d problem(s)\n", path, len(problems))
		return 2
	}
	for _, w := range daemon.Warnings(data) {
		loc := path
		if w.Line > 0 {
			loc = fmt.Sprintf("%s:%d", path, w.Line)
		}
		w.Line = 0
		fmt.Fprintf(stdout, "%s: %v\n", loc, w)
	}
	fmt.Fprintf(stdout, "%s: ok\n", path)
	return 0
}

// loadConfig reads the config the flags name: the --config file, or
// DefaultConfigPath if it exists, or the built-in default. It also returns
// where the config came from, for the log.
func loadConfig(path string, explicit bool) (daemon.Config, string, error) {
	if !explicit {
		if _, err := os.Stat(daemon.DefaultConfigPath); err != nil {
			return daemon.Default(), "built-in default", nil
		}
		path = daemon.DefaultConfigPath
	}
	cfg, err := daemon.Load(path)
	return cfg, path, err
}
