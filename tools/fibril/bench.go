package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/fibril-edge/fibril/tools/fibril/internal/benchutil"
	"github.com/fibril-edge/fibril/tools/fibril/internal/e2ebench"
)

// "fibril bench" is registered here, beside the other bench files; its
// hidden helpers "fibril bench nats-server" and "fibril bench
// fibrild-profiled" are dispatched by runE2EBench.
func init() {
	commands = append(commands, command{path: []string{"bench"},
		summary: "benchmark fibrild end to end beside NATS JetStream", run: runE2EBench})
}

const benchHelp = `Usage: fibril bench [flags]

Measures fibrild end to end over its wire protocol, beside NATS JetStream
(embedded from nats-server, file storage) in the same run, and prints one
JSON object per run on stdout; progress goes to stderr.

Systems (--systems): fibril-durable and fibril-buffered are two queues on
one fibrild, the mode set by their declaration; jetstream-always and
jetstream-default are two NATS servers, each in its own child process (this
binary, "fibril bench nats-server"), with sync_interval always and the
default sync. Without --addr, fibrild is started in a temporary directory
from --fibrild, or the fibrild next to this binary, or on PATH. --cluster N
adds cluster-durable and cluster-buffered: N fibrild nodes on loopback in
one cluster, each queue declared with majority placement (majority_durable,
or replica_buffered on a majority of the nodes), its clients connected to
the node that serves it; their process figures are the nodes' summed.
--spread N spreads each fibril and cluster system's stream over N queues
(the many-queue screen: each publisher's publishes go round robin over
them, each queue has its own consumer, with a window of 64); the systems
are then reported as fibril-Nq and fibril-3n-Nq.

Cases (--cases), each with --publishers publishers on their own
connections, --payload-byte messages and one consumer that acks:
  one-sync                     one publisher, one publish at a time: send,
                               wait for the confirm, send the next (the
                               plainest latency a user sees)
  rate-100, rate-1k, rate-10k  open-loop steady rates (rate-100 runs twice
                               --duration, so that p99.9 rests on 1,000 samples)
  burst                        200 messages every 100 ms
  saturation                   publish as fast as confirms come, at most
                               --window publishes in flight per publisher
Every open-loop message carries its intended send time: latency is from it
to the confirm and to the delivery, so a stall is never hidden. The delivery
is also split where the broker took the publish (its owner, in a cluster:
fibril says when in each delivery, JetStream in its metadata): receive, from
the intended send time to then, and receive_to_deliver, from then to the
consumer. A run that
has not confirmed and delivered everything within a grace period after its
schedule (the larger of 500 ms and a tenth of the schedule) is reported as
not sustained, with the rate it reached, and without latencies.

Each case runs --runs times; the systems run in ABBA order (forwards in odd
runs, backwards in even ones). The broker processes are measured from
/proc: CPU seconds, peak RSS, context switches, bytes written to storage.
--footprint adds one line per broker process: binary size, RSS and wake-ups per
second while idle, fsync-family syscalls per second while idle (strace, when
installed), and start-up time with --startup-bytes in the active segment; for
fibrild also what each of --queues empty buffered queues costs a fresh broker
once idle (disk blocks and open files per queue, the RSS of all).

--report writes the tables between marker comments in --doc and a latency
plot into --img; with --from FILE it reads earlier output instead of running.
--profile DIR runs the case behind each missed target once more on a fibrild
under the CPU profiler and saves the pprof profile in DIR.
`

// benchOptions is the parsed command line of "fibril bench".
type benchOptions struct {
	addr, admin  string
	pid          int
	fibrild      string
	dir          string
	systems      []string
	cases        []string
	runs         int
	duration     time.Duration
	publishers   int
	window       int
	payload      int
	warmup       int
	quick        bool
	footprint    bool
	idle         time.Duration
	startupBytes benchutil.ByteSize
	queues       int
	cluster      int
	spread       int
	report       bool
	from         string
	doc, img     string
	progress     bool
	profileDir   string
}

var (
	allSystems     = []string{"fibril-durable", "fibril-buffered", "jetstream-always", "jetstream-default"}
	clusterSystems = []string{"cluster-durable", "cluster-buffered"}
	allCases       = []string{"one-sync", "rate-100", "rate-1k", "rate-10k", "burst", "saturation"}
)

func parseBenchFlags(args []string, stdout io.Writer) (*benchOptions, error) {
	o := &benchOptions{startupBytes: 1 << 30, queues: 1000}
	fs := pflag.NewFlagSet("fibril bench", pflag.ContinueOnError)
	fs.StringVar(&o.addr, "addr", "", "drive a running fibrild at this client address instead of starting one (no process figures unless --pid)")
	fs.StringVar(&o.admin, "admin", "", "with --addr: its admin API URL, to delete each run's queue")
	fs.IntVar(&o.pid, "pid", 0, "with --addr: the fibrild's process id, to measure it in /proc")
	fs.StringVar(&o.fibrild, "fibrild", "", "fibrild binary to start (default: next to this binary, else on PATH)")
	fs.StringVar(&o.dir, "dir", "", "directory for the brokers' data (default: a temporary directory under the current one, removed afterwards)")
	fs.StringSliceVar(&o.systems, "systems", allSystems, "systems to run (also cluster-durable and cluster-buffered: see --cluster)")
	fs.IntVar(&o.cluster, "cluster", 0, "also run the cases on a cluster of this many fibrild nodes on loopback (systems cluster-durable, majority_durable, and cluster-buffered, replica_buffered on a majority)")
	fs.IntVar(&o.spread, "spread", 0, "spread each fibril and cluster system's stream over this many queues (the many-queue screen: publishes round robin, a consumer a queue); 0: one queue")
	fs.StringSliceVar(&o.cases, "cases", allCases, "cases to run")
	fs.IntVar(&o.runs, "runs", 3, "runs of each case")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "length of each open-loop schedule and saturation run")
	fs.IntVar(&o.publishers, "publishers", 4, "publishers, each on its own connection")
	fs.IntVar(&o.window, "window", 256, "publishes in flight per publisher, at most")
	fs.IntVar(&o.payload, "payload", 1024, "message size in bytes")
	fs.IntVar(&o.warmup, "warmup", 500, "untimed messages published and consumed before each run")
	fs.BoolVar(&o.quick, "quick", false, "smoke test in under a minute: one short run of each case, a small start-up segment")
	fs.BoolVar(&o.footprint, "footprint", true, "measure each system's footprint")
	fs.DurationVar(&o.idle, "idle", 5*time.Second, "length of the idle measurements of --footprint")
	fs.Var(&o.startupBytes, "startup-bytes", "bytes published before the start-up measurement of --footprint (0: skip it)")
	fs.IntVar(&o.queues, "queues", 1000, "empty buffered queues --footprint declares on a fresh fibrild, to measure each one's disk and open files and the RSS of all (0: skip it)")
	fs.BoolVar(&o.report, "report", false, "write the tables into --doc and the plot into --img")
	fs.StringVar(&o.from, "from", "", "with --report: read the JSON lines of an earlier run from this file instead of running")
	fs.StringVar(&o.doc, "doc", "docs/performance.md", "markdown file --report writes its tables into")
	fs.StringVar(&o.img, "img", "docs/img", "directory --report writes its plot into")
	fs.BoolVar(&o.progress, "progress", false, "draw the progress bar even when stderr is not a terminal")
	fs.StringVar(&o.profileDir, "profile", "", "after the runs, run each case behind a missed target again on a fibrild under the CPU profiler and save its pprof profile in this directory")
	if done, err := parseFlags(fs, benchHelp, args, stdout); done || err != nil {
		if done {
			return nil, nil
		}
		return nil, err
	}
	if err := wantArgs(fs, 0, 0, ""); err != nil {
		return nil, err
	}
	if o.quick {
		if !fs.Changed("runs") {
			o.runs = 1
		}
		if !fs.Changed("duration") {
			o.duration = 500 * time.Millisecond
		}
		if !fs.Changed("idle") {
			o.idle = 500 * time.Millisecond
		}
		if !fs.Changed("startup-bytes") {
			o.startupBytes = 4 << 20
		}
		if !fs.Changed("warmup") {
			o.warmup = 100
		}
		if !fs.Changed("queues") {
			o.queues = 20
		}
	}
	if o.cluster > 0 && !fs.Changed("systems") {
		o.systems = append(o.systems, clusterSystems...)
	}
	if o.cluster == 0 && slices.ContainsFunc(o.systems, func(s string) bool { return slices.Contains(clusterSystems, s) }) {
		o.cluster = 3
	}
	return o, o.validate()
}

func (o *benchOptions) validate() error {
	for _, s := range o.systems {
		if !slices.Contains(allSystems, s) && !slices.Contains(clusterSystems, s) {
			return usagef("--systems: unknown system %q (want %s)", s, strings.Join(append(slices.Clone(allSystems), clusterSystems...), ", "))
		}
	}
	if o.cluster < 0 || o.cluster == 1 || o.cluster > 9 {
		return usagef("--cluster: %d nodes (want 2 to 9, or 0 for none)", o.cluster)
	}
	if o.spread < 0 || o.spread > 10000 {
		return usagef("--spread: %d queues (want 0 to 10000)", o.spread)
	}
	if o.cluster > 0 && o.addr != "" {
		return usagef("--cluster starts its own nodes: it does not go with --addr")
	}
	for _, c := range o.cases {
		if !slices.Contains(allCases, c) {
			return usagef("--cases: unknown case %q (want %s)", c, strings.Join(allCases, ", "))
		}
	}
	switch {
	case o.runs < 1 || o.publishers < 1 || o.window < 1 || o.warmup < 1:
		return usagef("--runs, --publishers, --window and --warmup must be at least 1")
	case o.payload < 16:
		return usagef("--payload must be at least 16 bytes (the send time and index ride in the message)")
	case o.duration < 100*time.Millisecond:
		return usagef("--duration must be at least 100ms")
	case o.from != "" && !o.report:
		return usagef("--from needs --report")
	case (o.admin != "" || o.pid != 0) && o.addr == "":
		return usagef("--admin and --pid go with --addr")
	}
	return nil
}

// runE2EBench is "fibril bench".
func runE2EBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "nats-server":
			return runBenchNATSServer(ctx, args[1:], stdout, stderr)
		case "fibrild-profiled":
			return runBenchProfiledFibrild(ctx, args[1:], stdout, stderr)
		}
	}
	o, err := parseBenchFlags(args, stdout)
	if o == nil || err != nil {
		return err
	}
	if o.from != "" {
		return reportFromFile(o, stderr)
	}
	results, err := benchRun(ctx, o, stdout, stderr)
	if err != nil {
		return err
	}
	if o.report {
		return writeReport(o, results, stderr)
	}
	return nil
}

// benchRun starts the systems, runs every case and the footprint, and
// returns what it printed.
func benchRun(ctx context.Context, o *benchOptions, stdout, stderr io.Writer) (res *e2ebench.Results, err error) {
	res = &e2ebench.Results{}
	base, cleanup, err := benchDir(o.dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := cleanup(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	env, err := benchEnv(base, o.quick)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "bench dir %s (fs %s, kernel %s, %d cpus, fsync floor p50 %.0f µs)\n",
		base, env.FS, env.Kernel, env.CPUs, env.FsyncP50)
	sys, err := startSystems(ctx, o, base, stderr)
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := sys.stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	if o.footprint {
		if err := runFootprint(ctx, o, sys, base, env, res, stdout, stderr); err != nil {
			return res, err
		}
	}
	if err := runCases(ctx, o, sys, env, res, stdout, stderr); err != nil {
		return res, err
	}
	if o.profileDir != "" && o.addr == "" && sys.fibrildBin != "" {
		if err := profileMissed(ctx, o, res, base, stderr); err != nil {
			return res, err
		}
	}
	return res, nil
}
