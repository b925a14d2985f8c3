package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/fibril-edge/fibril/tools/fibril/internal/benchutil"
	"github.com/fibril-edge/fibril/tools/fibril/internal/e2ebench"
)

// schedule builds the open-loop schedule of a case.
func (o *benchOptions) schedule(name string) (e2ebench.Schedule, error) {
	switch name {
	case "rate-100":
		return e2ebench.Steady(name, 100, 2*o.duration, o.publishers)
	case "rate-1k":
		return e2ebench.Steady(name, 1000, o.duration, o.publishers)
	case "rate-10k":
		return e2ebench.Steady(name, 10000, o.duration, o.publishers)
	case "burst":
		return e2ebench.Bursts(name, 200, 100*time.Millisecond, o.duration, o.publishers)
	}
	return e2ebench.Schedule{}, fmt.Errorf("no schedule for case %q", name)
}

// abba is the order of the systems in run r (from 1): forwards in odd
// runs, backwards in even ones, so that no system always goes first.
func abba[T any](list []T, r int) []T {
	out := slices.Clone(list)
	if r%2 == 0 {
		slices.Reverse(out)
	}
	return out
}

// runCases runs every case --runs times on every system, printing a line
// per run.
func runCases(ctx context.Context, o *benchOptions, sys *benchSystems, env e2ebench.Env, res *e2ebench.Results, stdout, stderr io.Writer) error {
	total := int64(len(o.cases) * o.runs * len(sys.list))
	bar := newProgress(stderr, o.progress, "bench", nil)
	var done int64
	for _, c := range o.cases {
		for r := 1; r <= o.runs; r++ {
			for i, s := range abba(sys.list, r) {
				if err := ctx.Err(); err != nil {
					return err
				}
				ro := e2ebench.RunOptions{Payload: o.payload, Window: o.window, Warmup: o.warmup, Pids: s.pids}
				name := fmt.Sprintf("bench-%s-%s-%d", c, s.name, r)
				var out e2ebench.Result
				var err error
				switch c {
				case "saturation":
					out, err = e2ebench.RunSaturation(ctx, s.target, name, o.publishers, o.duration, ro)
				case "one-sync":
					out, err = e2ebench.RunOneSync(ctx, s.target, name, o.duration, ro)
				default:
					sch, serr := o.schedule(c)
					if serr != nil {
						return serr
					}
					out, err = e2ebench.RunOpenLoop(ctx, s.target, name, sch, ro)
				}
				if err != nil {
					return fmt.Errorf("%s, %s, run %d: %w", c, s.name, r, err)
				}
				out.Run, out.Order, out.Env = r, i+1, env
				res.Runs = append(res.Runs, out)
				if err := benchutil.WriteJSONLine(stdout, out); err != nil {
					return err
				}
				done++
				if bar != nil {
					fmt.Fprintf(stderr, "\r\033[K%s\n", describeRun(out))
				} else {
					fmt.Fprintln(stderr, describeRun(out))
				}
				bar.Update(done, total)
			}
		}
	}
	bar.Done(done, total)
	return nil
}

// describeRun is the one-line summary of a run for stderr.
func describeRun(r e2ebench.Result) string {
	head := fmt.Sprintf("%-10s %-22s run %d:", r.Case, r.Label(), r.Run)
	switch {
	case r.Case == "saturation":
		return fmt.Sprintf("%s confirmed %.0f/s, delivered %.0f/s", head, r.ConfirmedPerSec, r.DeliveredPerSec)
	case !r.Sustained:
		return fmt.Sprintf("%s not sustained, reached %.0f/s confirmed, %.0f/s delivered", head, r.ConfirmedPerSec, r.DeliveredPerSec)
	case r.Case == "one-sync":
		return fmt.Sprintf("%s confirm p50 %.0f µs p99 %.0f µs, %.0f confirms/s", head, r.Confirm.P50, r.Confirm.P99, r.ConfirmedPerSec)
	}
	return fmt.Sprintf("%s deliver p50 %.0f µs p99 %.0f µs; confirm p50 %.0f µs p99 %.0f µs",
		head, r.Deliver.P50, r.Deliver.P99, r.Confirm.P50, r.Confirm.P99)
}
