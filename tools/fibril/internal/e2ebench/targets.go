package e2ebench

import "fmt"

// Verdict is one of the targets judged on one run's results.
type Verdict struct {
	Target   string
	Measured string
	Verdict  string // "met", "missed" or "not measured"
	// Case and Mode are the case and Fibril mode to profile when the
	// target is missed.
	Case, Mode string
}

// ratio compares a Fibril figure with a JetStream one in the same run:
// met when fibril/js is at most limit (or at least, with atLeast).
func ratio(target, cs string, fib, js Group, okF, okJ bool, f func(Result) (float64, bool), limit float64, atLeast bool, unit string) Verdict {
	v := Verdict{Target: target, Case: cs, Mode: fib.Mode, Verdict: "not measured", Measured: "a system was not run"}
	if !okF || !okJ {
		return v
	}
	if !fib.Sustained() {
		v.Verdict = "missed"
		v.Measured = fmt.Sprintf("%s not sustained in %d of %d runs", fib.Label(), fib.Unsustained(), len(fib.Runs))
		return v
	}
	a := fib.Stat(f)
	if !js.Sustained() {
		v.Verdict = "met"
		v.Measured = fmt.Sprintf("%s %s %s; %s not sustained (reached %.0f/s delivered)",
			fib.Label(), num(a.Median), unit, js.Label(), js.Stat(Delivered).Median)
		return v
	}
	b := js.Stat(f)
	if b.Median == 0 {
		return v
	}
	r := a.Median / b.Median
	met := r <= limit
	if atLeast {
		met = r >= limit
	}
	v.Verdict = map[bool]string{true: "met", false: "missed"}[met]
	v.Measured = fmt.Sprintf("%s %s against %s %s: %.2f×", num(a.Median), unit, num(b.Median), unit, r)
	return v
}

// Targets judges the targets on a run's results: ratios of
// medians of the same run, Fibril against the JetStream configuration of
// like durability.
func Targets(runs []Result) []Verdict {
	gs := Groups(runs)
	pair := func(cs, a, b string) (Group, Group, bool, bool) {
		f, okF := Find(gs, cs, a)
		j, okJ := Find(gs, cs, b)
		return f, j, okF, okJ
	}
	var out []Verdict
	f, j, a, b := pair("rate-10k", "fibril buffered", "jetstream default-sync")
	out = append(out,
		ratio("buffered, 10k/s: publish-to-deliver p50 ≤ 0.75× JetStream default-sync", "rate-10k", f, j, a, b, DeliverP50, 0.75, false, "µs"),
		ratio("buffered, 10k/s: publish-to-deliver p99 ≤ 0.25× JetStream default-sync", "rate-10k", f, j, a, b, DeliverP99, 0.25, false, "µs"))
	f, j, a, b = pair("rate-100", "fibril durable", "jetstream always-sync")
	out = append(out, ratio("durable, 100/s: publish-to-deliver p50 ≤ 0.35× JetStream always-sync", "rate-100", f, j, a, b, DeliverP50, 0.35, false, "µs"))
	f, j, a, b = pair("saturation", "fibril durable", "jetstream always-sync")
	out = append(out, ratio("durable saturation ≥ 5× JetStream always-sync", "saturation", f, j, a, b, Confirmed, 5, true, "msgs/s"))
	sd := ratio("CPU per million messages, durable ≤ JetStream always-sync (saturation)", "saturation", f, j, a, b, CPUPerM, 1, false, "CPU s")
	f, j, a, b = pair("saturation", "fibril buffered", "jetstream default-sync")
	out = append(out, ratio("buffered saturation ≥ 1.5× JetStream default-sync", "saturation", f, j, a, b, Confirmed, 1.5, true, "msgs/s"))
	sb := ratio("CPU per million messages, buffered ≤ JetStream default-sync (saturation)", "saturation", f, j, a, b, CPUPerM, 1, false, "CPU s")
	f, j, a, b = pair("rate-1k", "fibril durable", "jetstream always-sync")
	rd := ratio("CPU per million messages, durable ≤ JetStream always-sync (1k/s)", "rate-1k", f, j, a, b, CPUPerM, 1, false, "CPU s")
	f, j, a, b = pair("rate-1k", "fibril buffered", "jetstream default-sync")
	rb := ratio("CPU per million messages, buffered ≤ JetStream default-sync (1k/s)", "rate-1k", f, j, a, b, CPUPerM, 1, false, "CPU s")
	return append(out, rd, rb, sd, sb)
}

// num prints a figure with no more precision than it deserves.
func num(x float64) string {
	switch {
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	}
	return fmt.Sprintf("%.2f", x)
}
