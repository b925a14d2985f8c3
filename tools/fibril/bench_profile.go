package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/fibril-edge/fibril/internal/fibrildproc"
	"github.com/fibril-edge/fibril/tools/fibril/internal/e2ebench"
	"github.com/fibril-edge/fibril/tools/internal/daemon"
)

// "fibril bench fibrild-profiled --cpuprofile FILE [--memprofile FILE]
// [--trace FILE] [fibrild flags]" runs the daemon (tools/internal/daemon.Run,
// the code of fibrild) in this process under the CPU profiler, taking
// fibrild's --config and --section.key flags; the profile is written when
// it shuts down on SIGTERM. --trace also records an execution trace of
// the whole run (runtime/trace): which goroutine woke which, and how long
// each waited for a processor (go tool trace -pprof=sched).
func runBenchProfiledFibrild(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("fibril bench fibrild-profiled", pflag.ContinueOnError)
	profile := fs.String("cpuprofile", "", "write the CPU profile here")
	memProfile := fs.String("memprofile", "", "also write the allocation profile here at shutdown")
	traceOut := fs.String("trace", "", "also write an execution trace of the whole run here")
	configPath := fs.String("config", "", "config file (default: the built-in default)")
	overrides := map[string]*string{}
	for _, k := range daemon.Keys() {
		overrides[k.Name] = fs.String(k.Name, k.Default, k.Help)
	}
	if done, err := parseFlags(fs, "Usage: fibril bench fibrild-profiled --cpuprofile FILE [--memprofile FILE] [--trace FILE] [fibrild flags]\n", args, stdout); done || err != nil {
		return err
	}
	if *profile == "" {
		return usagef("--cpuprofile is required")
	}
	cfg := daemon.Default()
	if *configPath != "" {
		var err error
		if cfg, err = daemon.Load(*configPath); err != nil {
			return err
		}
	}
	for _, k := range daemon.Keys() {
		if fs.Changed(k.Name) {
			if err := cfg.Set(k.Name, *overrides[k.Name]); err != nil {
				return usagef("--%v", err)
			}
		}
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log, err := daemon.NewLogger(cfg.Log, stderr)
	if err != nil {
		return err
	}
	f, err := os.Create(*profile)
	if err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	stopTrace, err := startTrace(*traceOut)
	if err != nil {
		pprof.StopCPUProfile()
		return err
	}
	runErr := daemon.Run(ctx, cfg, log)
	traceErr := stopTrace()
	pprof.StopCPUProfile()
	return errors.Join(runErr, f.Close(), traceErr, writeAllocs(*memProfile))
}

// startTrace starts an execution trace into path, if one is given, and
// returns what stops it.
func startTrace(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("trace: %w", err)
	}
	return func() error {
		trace.Stop()
		return f.Close()
	}, nil
}

// writeAllocs writes the allocation profile (every allocation sampled since
// the process started) to path, if one is given.
func writeAllocs(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("allocation profile: %w", err)
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("allocation profile: %w", err)
	}
	return f.Close()
}

// profileMissed runs the case behind each missed target once more, on a
// fibrild in the target's mode profiled from start to stop, and saves the
// profile as fibrild-CASE-MODE.pprof in --profile.
func profileMissed(ctx context.Context, o *benchOptions, res *e2ebench.Results, base string, stderr io.Writer) error {
	if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	done := map[string]bool{}
	for _, v := range e2ebench.Targets(res.Runs) {
		if v.Verdict != "missed" || done[v.Case+" "+v.Mode] {
			continue
		}
		done[v.Case+" "+v.Mode] = true
		out, err := profileCase(ctx, o, base, v.Case, v.Mode == "durable")
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "missed target %q: CPU profile of fibrild in %s\n", v.Target, out)
	}
	return nil
}

// profileCase runs one case on a fresh fibrild under the CPU profiler (this
// binary's fibrild-profiled helper, behind a wrapper script so that
// fibrildproc can start it) and returns the profile's path.
func profileCase(ctx context.Context, o *benchOptions, base, cs string, durable bool) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("profile: %w", err)
	}
	target := e2ebench.Fibril{Durable: durable}
	out, err := filepath.Abs(filepath.Join(o.profileDir, fmt.Sprintf("fibrild-%s-%s.pprof", cs, target.Mode())))
	if err != nil {
		return "", err
	}
	wrapper := filepath.Join(base, "fibrild-profiled")
	script := "#!/bin/sh\nexec " + strconv.Quote(self) + " bench fibrild-profiled --cpuprofile " + strconv.Quote(out) + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		return "", fmt.Errorf("profile: %w", err)
	}
	p, err := startBenchFibrild(ctx, wrapper, filepath.Join(base, "profiled-"+cs+"-"+target.Mode()))
	if err != nil {
		return "", err
	}
	target.Addr, target.Admin = p.Addr, p.Admin
	ro := e2ebench.RunOptions{Payload: o.payload, Window: o.window, Warmup: o.warmup}
	name := "bench-profiled-" + cs
	if cs == "saturation" {
		_, err = e2ebench.RunSaturation(ctx, target, name, o.publishers, o.duration, ro)
	} else if sch, serr := o.schedule(cs); serr != nil {
		err = serr
	} else {
		_, err = e2ebench.RunOpenLoop(ctx, target, name, sch, ro)
	}
	if serr := p.Stop(fibrildproc.DefaultStartTimeout); err == nil {
		err = serr
	}
	if err != nil {
		return "", fmt.Errorf("profile %s %s: %w", cs, target.Mode(), err)
	}
	return out, nil
}
