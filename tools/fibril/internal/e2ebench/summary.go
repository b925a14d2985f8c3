package e2ebench

import (
	"slices"
)

// Stat is the median and range of one figure over the runs of a group.
type Stat struct {
	Median, Min, Max float64
	N                int
}

func stat(values []float64) Stat {
	if len(values) == 0 {
		return Stat{}
	}
	v := slices.Clone(values)
	slices.Sort(v)
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return Stat{Median: med, Min: v[0], Max: v[len(v)-1], N: len(v)}
}

// Group is every run of one case on one system and mode.
type Group struct {
	Case, System, Mode string
	Runs               []Result
}

// Label is "system mode".
func (g Group) Label() string { return g.System + " " + g.Mode }

// Sustained reports whether every run was sustained.
func (g Group) Sustained() bool {
	for _, r := range g.Runs {
		if !r.Sustained {
			return false
		}
	}
	return len(g.Runs) > 0
}

// Unsustained counts the runs that were not sustained.
func (g Group) Unsustained() int {
	n := 0
	for _, r := range g.Runs {
		if !r.Sustained {
			n++
		}
	}
	return n
}

// Stat summarises f over the group's runs (runs where f is not defined
// return ok false and are left out).
func (g Group) Stat(f func(Result) (float64, bool)) Stat {
	var v []float64
	for _, r := range g.Runs {
		if x, ok := f(r); ok {
			v = append(v, x)
		}
	}
	return stat(v)
}

// Figures of a Result, for Group.Stat.
var (
	DeliverP50  = func(r Result) (float64, bool) { return latOf(r.Deliver, func(l Latency) float64 { return l.P50 }) }
	DeliverP99  = func(r Result) (float64, bool) { return latOf(r.Deliver, func(l Latency) float64 { return l.P99 }) }
	DeliverP999 = func(r Result) (float64, bool) { return latOf(r.Deliver, func(l Latency) float64 { return l.P999 }) }
	DeliverMax  = func(r Result) (float64, bool) { return latOf(r.Deliver, func(l Latency) float64 { return l.Max }) }
	ConfirmP50  = func(r Result) (float64, bool) { return latOf(r.Confirm, func(l Latency) float64 { return l.P50 }) }
	ConfirmP99  = func(r Result) (float64, bool) { return latOf(r.Confirm, func(l Latency) float64 { return l.P99 }) }
	SendLagP50  = func(r Result) (float64, bool) { return latOf(r.SendLag, func(l Latency) float64 { return l.P50 }) }
	SendLagP99  = func(r Result) (float64, bool) { return latOf(r.SendLag, func(l Latency) float64 { return l.P99 }) }
	Confirmed   = func(r Result) (float64, bool) { return r.ConfirmedPerSec, true }
	Delivered   = func(r Result) (float64, bool) { return r.DeliveredPerSec, true }
	CPUPerM     = func(r Result) (float64, bool) { return useOf(r, func(u Usage) float64 { return u.CPUPerMillion }) }
	PeakRSS     = func(r Result) (float64, bool) { return useOf(r, func(u Usage) float64 { return float64(u.PeakRSS) }) }
	WrittenPer  = func(r Result) (float64, bool) { return useOf(r, func(u Usage) float64 { return u.WrittenPerPayload }) }
)

func latOf(l *Latency, f func(Latency) float64) (float64, bool) {
	if l == nil {
		return 0, false
	}
	return f(*l), true
}

func useOf(r Result, f func(Usage) float64) (float64, bool) {
	if r.Broker == nil {
		return 0, false
	}
	return f(*r.Broker), true
}

// Groups gathers runs by case, system and mode, in first-seen order.
func Groups(runs []Result) []Group {
	var gs []Group
	idx := map[[3]string]int{}
	for _, r := range runs {
		k := [3]string{r.Case, r.System, r.Mode}
		i, ok := idx[k]
		if !ok {
			i = len(gs)
			idx[k] = i
			gs = append(gs, Group{Case: r.Case, System: r.System, Mode: r.Mode})
		}
		gs[i].Runs = append(gs[i].Runs, r)
	}
	return gs
}

// Find returns the group of a case and label ("fibril durable").
func Find(gs []Group, cs, label string) (Group, bool) {
	for _, g := range gs {
		if g.Case == cs && g.Label() == label {
			return g, true
		}
	}
	return Group{}, false
}
