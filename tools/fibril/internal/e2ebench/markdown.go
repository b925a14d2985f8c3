package e2ebench

import (
	"fmt"
	"strings"
)

// Markdown renders results as the report's tables: open-loop latency,
// saturation, footprint and the targets.
func Markdown(res *Results, plot string) string {
	var b strings.Builder
	gs := Groups(res.Runs)
	if len(res.Runs) > 0 {
		e := res.Runs[0].Env
		fmt.Fprintf(&b, "Machine: %d CPUs, kernel %s, %s, %s; fdatasync floor p50 %.0f µs (`fibril doctor`'s measurement, same directory).\n\n",
			e.CPUs, e.Kernel, e.FS, e.Go, e.FsyncP50)
		r := res.Runs[0]
		fmt.Fprintf(&b, "%d-byte messages, %d publishers (one connection each, at most %d publishes in flight each), one consumer acking each delivery. Figures are the median of the runs with the range in brackets; latencies in µs from the intended send time. Send lag is how late the bench's publishers sent against their schedule (the bench's own share of every latency, medians).\n\n",
			r.Payload, r.Publishers, r.Window)
	}
	b.WriteString("| case | system | runs | deliver p50 | deliver p99 | deliver p99.9 | deliver max | confirm p50 | confirm p99 | send lag p50 / p99 | broker CPU s per M msgs | peak RSS MiB |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, g := range gs {
		if g.Case == "saturation" {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %d |", g.Case, g.Label(), len(g.Runs))
		if !g.Sustained() {
			fmt.Fprintf(&b, " **not sustained** in %d of %d runs: reached %s/s confirmed, %s/s delivered | — | — | — | — | — |",
				g.Unsustained(), len(g.Runs), rng(g.Stat(Confirmed)), rng(g.Stat(Delivered)))
		} else {
			for _, f := range []func(Result) (float64, bool){DeliverP50, DeliverP99, DeliverP999, DeliverMax, ConfirmP50, ConfirmP99} {
				fmt.Fprintf(&b, " %s |", rng(g.Stat(f)))
			}
		}
		fmt.Fprintf(&b, " %s / %s | %s | %s |\n", num(g.Stat(SendLagP50).Median), num(g.Stat(SendLagP99).Median),
			rng(g.Stat(CPUPerM)), mib(g.Stat(PeakRSS)))
	}
	b.WriteString("\nSaturation (closed loop, bounded window):\n\n")
	b.WriteString("| system | runs | confirmed msgs/s | delivered msgs/s | broker CPU s per M msgs | peak RSS MiB |\n|---|---|---|---|---|---|\n")
	for _, g := range gs {
		if g.Case != "saturation" {
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s |\n", g.Label(), len(g.Runs),
			rng(g.Stat(Confirmed)), rng(g.Stat(Delivered)), rng(g.Stat(CPUPerM)), mib(g.Stat(PeakRSS)))
	}
	footprintTable(&b, res, gs)
	b.WriteString("\nTargets (ratios of medians from this run):\n\n| target | measured | verdict |\n|---|---|---|\n")
	for _, v := range Targets(res.Runs) {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", v.Target, v.Measured, v.Verdict)
	}
	if plot != "" {
		fmt.Fprintf(&b, "\n![publish-to-deliver latency, p50 bars and p99 marks](%s)\n", plot)
	}
	return b.String()
}

func footprintTable(b *strings.Builder, res *Results, gs []Group) {
	if len(res.Footprints) == 0 {
		return
	}
	b.WriteString("\nFootprint (idle: a broker holding one queue or stream of 100 messages, its connections open, nothing published):\n\n")
	b.WriteString("| process | binary | idle RSS MiB | idle wake-ups/s | idle syncs/s | idle bytes written/s | start-up |\n|---|---|---|---|---|---|---|\n")
	for _, f := range res.Footprints {
		bin, start, syncs := "n/a (embedded)", "—", "n/a (no strace)"
		if f.BinaryBytes > 0 {
			bin = fmt.Sprintf("%.1f MiB", float64(f.BinaryBytes)/(1<<20))
		}
		if f.StartupSeconds >= 0 {
			start = fmt.Sprintf("%.2f s with %.0f MiB stored", f.StartupSeconds, float64(f.StartupBytes)/(1<<20))
		}
		if f.IdleSyncs >= 0 {
			syncs = num(f.IdleSyncs)
		}
		fmt.Fprintf(b, "| %s | %s | %.1f | %s | %s | %s | %s |\n", f.Process, bin, float64(f.IdleRSS)/(1<<20),
			num(f.IdleWakeups), syncs, num(f.IdleWrites), start)
	}
	for _, f := range res.Footprints {
		if f.Queues > 0 {
			fmt.Fprintf(b, "\nMany queues: %d empty buffered queues on a fresh %s, once idle: %.0f KiB of disk and %.2f open files per queue, RSS %.1f MiB in all.\n",
				f.Queues, f.Process, float64(f.QueueDiskBytes)/(1<<10), f.QueueOpenFiles, float64(f.QueuesRSS)/(1<<20))
		}
	}
	b.WriteString("\nUnder load, per mode: peak RSS at 10k/s and bytes the broker process wrote to storage (`/proc/PID/io` write_bytes) per payload byte published at 1k/s (flash wear):\n\n")
	b.WriteString("| system | peak RSS at 10k/s MiB | bytes written per byte published (1k/s) | (10k/s) |\n|---|---|---|---|\n")
	seen := map[string]bool{}
	for _, g := range gs {
		if seen[g.Label()] {
			continue
		}
		seen[g.Label()] = true
		g10, _ := Find(gs, "rate-10k", g.Label())
		g1, _ := Find(gs, "rate-1k", g.Label())
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", g.Label(), mib(g10.Stat(PeakRSS)), rng(g1.Stat(WrittenPer)), rng(g10.Stat(WrittenPer)))
	}
}

// rng prints "median (min–max)", or the value alone for one run.
func rng(s Stat) string {
	switch {
	case s.N == 0:
		return "—"
	case s.N == 1 || s.Min == s.Max:
		return num(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", num(s.Median), num(s.Min), num(s.Max))
}

func mib(s Stat) string {
	if s.N == 0 {
		return "—"
	}
	return rng(Stat{Median: s.Median / (1 << 20), Min: s.Min / (1 << 20), Max: s.Max / (1 << 20), N: s.N})
}
