package e2ebench

import (
	"context"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestSteadySchedule(t *testing.T) {
	s, err := Steady("rate-1k", 1000, 2*time.Second, 3)
	if err != nil {
		t.Fatal(err)
	}
	if s.Total() != 2000 || len(s.Sends) != 3 {
		t.Fatalf("total %d over %d publishers, want 2000 over 3", s.Total(), len(s.Sends))
	}
	// Round robin: publisher p sends messages p, p+3, ...; message k at k ms.
	if got := s.Sends[1][2]; got != 7*time.Millisecond {
		t.Fatalf("publisher 1's third send at %v, want 7ms", got)
	}
	for p, sends := range s.Sends {
		for i := 1; i < len(sends); i++ {
			if sends[i] <= sends[i-1] {
				t.Fatalf("publisher %d: offsets not ascending at %d", p, i)
			}
		}
	}
	if _, err := Steady("x", 0, time.Second, 1); err == nil {
		t.Fatal("a zero rate was accepted")
	}
}

func TestBurstSchedule(t *testing.T) {
	s, err := Bursts("burst", 200, 100*time.Millisecond, time.Second, 4)
	if err != nil {
		t.Fatal(err)
	}
	if s.Total() != 2000 || s.Rate != 2000 {
		t.Fatalf("total %d, rate %v; want 2000 and 2000/s", s.Total(), s.Rate)
	}
	for _, sends := range s.Sends {
		if len(sends) != 500 || sends[0] != 0 || sends[49] != 0 || sends[50] != 100*time.Millisecond {
			t.Fatalf("a publisher's sends: %d, first burst ends %v, second starts %v", len(sends), sends[49], sends[50])
		}
	}
}

func TestBodyRoundTrip(t *testing.T) {
	at := time.Unix(1700000000, 123456789)
	b := EncodeBody(1024, at, 4242)
	if len(b) != 1024 {
		t.Fatalf("body of %d bytes, want 1024", len(b))
	}
	got, idx, err := DecodeBody(b)
	if err != nil || !got.Equal(at) || idx != 4242 {
		t.Fatalf("DecodeBody = %v, %d, %v", got, idx, err)
	}
	if _, _, err := DecodeBody(b[:8]); !errors.Is(err, ErrShortBody) {
		t.Fatalf("short body: %v", err)
	}
}

func TestBodyFillerIsTheAlphabetByPosition(t *testing.T) {
	for _, size := range []int{0, 1, 16, 17, 41, 42, 43, 100, 1024, 65537} {
		b := EncodeBody(size, time.Unix(1, 0), 7)
		if len(b) != max(size, bodyHeader) {
			t.Fatalf("size %d: body of %d bytes", size, len(b))
		}
		for i := bodyHeader; i < len(b); i++ {
			if want := byte('a' + i%26); b[i] != want {
				t.Fatalf("size %d: byte %d is %q, want %q", size, i, b[i], want)
			}
		}
	}
}

func TestRunOpenLoopMeasuresFromIntendedTime(t *testing.T) {
	s, err := Steady("rate", 500, 400*time.Millisecond, 2)
	if err != nil {
		t.Fatal(err)
	}
	const delay = 5 * time.Millisecond
	r, err := RunOpenLoop(context.Background(), fakeTarget{confirmDelay: delay}, "q", s, RunOptions{Payload: 64, Warmup: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Sustained || r.Sent != 200 || r.Confirmed != 200 || r.Delivered != 200 || r.Failed != 0 {
		t.Fatalf("result %+v", r)
	}
	if r.Confirm == nil || r.Deliver == nil || r.SendLag == nil || r.Confirm.N != 200 || r.Deliver.N != 200 || r.SendLag.N != 200 {
		t.Fatalf("latencies missing: %+v %+v", r.Confirm, r.Deliver)
	}
	// Every latency includes the broker's delay.
	us := float64(delay / time.Microsecond)
	if r.Confirm.P50 < us || r.Deliver.P50 < us || r.Deliver.Max < r.Deliver.P999 || r.Deliver.P999 < r.Deliver.P50 {
		t.Fatalf("confirm %+v, deliver %+v", *r.Confirm, *r.Deliver)
	}
	if r.ConfirmedPerSec < 300 || r.ConfirmedPerSec > 700 {
		t.Fatalf("confirmed %v/s at a 500/s schedule", r.ConfirmedPerSec)
	}
}

// Confirms that come out of publish order (a stream over several queues)
// are measured when they came: the first publish's slow confirm is not
// charged to the publishes after it, which the bench waits for in order.
func TestRunOpenLoopMeasuresEachConfirmWhenItCame(t *testing.T) {
	s, err := Steady("rate", 500, 400*time.Millisecond, 1)
	if err != nil {
		t.Fatal(err)
	}
	const slow = 300 * time.Millisecond
	first := fakeTarget{confirmDelay: time.Millisecond, slow: func(i int) time.Duration {
		if i == 0 {
			return slow
		}
		return 0
	}}
	r, err := RunOpenLoop(context.Background(), first, "q", s, RunOptions{Payload: 64, Warmup: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Sustained || r.Confirm == nil || r.Confirm.N != 200 {
		t.Fatalf("result %+v", r)
	}
	// Waiting in order and stamping on return would put the median near
	// 100 ms: the publishes sent in the slow one's first 300 ms.
	if r.Confirm.P50 > 50_000 || r.Confirm.Max < float64(slow/time.Microsecond) {
		t.Fatalf("confirm %+v: want a median of the fast confirms and a max of the slow one", *r.Confirm)
	}
}

func TestRunOpenLoopWithAFailureIsNotSustained(t *testing.T) {
	s, err := Steady("rate", 200, 200*time.Millisecond, 1)
	if err != nil {
		t.Fatal(err)
	}
	lose := fakeTarget{refuse: func(i int) bool { return i == 7 }}
	r, err := RunOpenLoop(context.Background(), lose, "q", s, RunOptions{Payload: 64, Warmup: 5, Grace: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Sustained || r.Confirm != nil || r.Deliver != nil {
		t.Fatalf("a run with a refused publish: sustained %v, latencies %v %v", r.Sustained, r.Confirm, r.Deliver)
	}
	if r.Sent != 40 || r.Confirmed != 39 || r.Failed != 1 || r.Delivered != 39 || r.ConfirmedPerSec <= 0 {
		t.Fatalf("counts %+v", r)
	}
}

func TestRunSaturationCounts(t *testing.T) {
	r, err := RunSaturation(context.Background(), fakeTarget{confirmDelay: time.Millisecond}, "q", 2, 200*time.Millisecond,
		RunOptions{Payload: 64, Window: 8, Warmup: 4})
	if err != nil {
		t.Fatal(err)
	}
	// Two publishers with 8 in flight each and a 1 ms confirm: well above
	// 1,000/s, well below 16 per ms.
	if r.Case != "saturation" || r.Confirmed == 0 || r.ConfirmedPerSec < 1000 || r.ConfirmedPerSec > 16000 || r.Delivered > r.Sent {
		t.Fatalf("result %+v", r)
	}
}

// A stream over several queues frees a publisher's in-flight slot as each
// confirm comes: one slow confirm does not hold the window shut.
func TestRunSaturationFreesSlotsAsConfirmsCome(t *testing.T) {
	slowFirst := fakeTarget{confirmDelay: time.Millisecond, queues: 4, slow: func(i int) time.Duration {
		if i == 0 {
			return 2 * time.Second
		}
		return 0
	}}
	r, err := RunSaturation(context.Background(), slowFirst, "q", 1, 300*time.Millisecond,
		RunOptions{Payload: 64, Window: 8, Warmup: 4})
	if err != nil {
		t.Fatal(err)
	}
	// Freed in publish order, the window would stay shut behind the first
	// publish for the whole run: at most 7 confirms counted.
	if r.Confirmed < 100 {
		t.Fatalf("%d confirmed in 300 ms with a window of 8 and 1 ms confirms: the slow first one held the window", r.Confirmed)
	}
}

// A stream over several queues is warmed with a publish to every queue
// from every publisher, whatever --warmup says.
func TestWarmupCoversEveryQueue(t *testing.T) {
	s, err := Steady("rate", 500, 100*time.Millisecond, 2)
	if err != nil {
		t.Fatal(err)
	}
	var published atomic.Int64
	spread := fakeTarget{confirmDelay: time.Millisecond, queues: 40, published: &published}
	r, err := RunOpenLoop(context.Background(), spread, "q", s, RunOptions{Payload: 64, Warmup: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Sustained {
		t.Fatalf("result %+v", r)
	}
	if warm := int(published.Load()) - s.Total(); warm < 2*40 {
		t.Fatalf("%d warm-up publishes for 40 queues and 2 publishers, want at least 80", warm)
	}
}

func TestStat(t *testing.T) {
	if s := stat([]float64{3, 1, 2}); s.Median != 2 || s.Min != 1 || s.Max != 3 || s.N != 3 {
		t.Fatalf("stat odd = %+v", s)
	}
	if s := stat([]float64{4, 1, 2, 3}); s.Median != 2.5 {
		t.Fatalf("stat even = %+v", s)
	}
	if rng(stat([]float64{1500, 1200, 1900})) != "1500 (1200–1900)" {
		t.Fatalf("rng = %q", rng(stat([]float64{1500, 1200, 1900})))
	}
}

// run builds a result line for the report tests.
func run(cs, system, mode string, sustained bool, p50, p99, perSec, cpu float64) Result {
	r := Result{Kind: "run", Case: cs, System: system, Mode: mode, Run: 1, Sustained: sustained,
		ConfirmedPerSec: perSec, DeliveredPerSec: perSec, Broker: &Usage{CPUPerMillion: cpu, PeakRSS: 32 << 20}}
	if sustained {
		r.Confirm = &Latency{N: 100, P50: p50, P99: p99, P999: p99, Max: p99}
		r.Deliver = &Latency{N: 100, P50: p50, P99: p99, P999: p99, Max: p99}
	}
	return r
}

func TestTargets(t *testing.T) {
	runs := []Result{
		run("rate-10k", "fibril", "buffered", true, 300, 900, 10000, 10),
		run("rate-10k", "jetstream", "default-sync", true, 1000, 8000, 10000, 20),
		run("rate-100", "fibril", "durable", true, 500, 900, 100, 10),
		run("rate-100", "jetstream", "always-sync", true, 1000, 3000, 100, 20),
		run("saturation", "fibril", "durable", true, 0, 0, 20000, 30),
		run("saturation", "jetstream", "always-sync", true, 0, 0, 1000, 20),
	}
	got := map[string]Verdict{}
	for _, v := range Targets(runs) {
		got[v.Target] = v
	}
	want := map[string]string{
		"buffered, 10k/s: publish-to-deliver p50 ≤ 0.75× JetStream default-sync":   "met",    // 0.30
		"buffered, 10k/s: publish-to-deliver p99 ≤ 0.25× JetStream default-sync":   "met",    // 0.11
		"durable, 100/s: publish-to-deliver p50 ≤ 0.35× JetStream always-sync":     "missed", // 0.50
		"durable saturation ≥ 5× JetStream always-sync":                            "met",    // 20×
		"CPU per million messages, durable ≤ JetStream always-sync (saturation)":   "missed", // 1.5×
		"buffered saturation ≥ 1.5× JetStream default-sync":                        "not measured",
		"CPU per million messages, buffered ≤ JetStream default-sync (1k/s)":       "not measured",
		"CPU per million messages, durable ≤ JetStream always-sync (1k/s)":         "not measured",
		"CPU per million messages, buffered ≤ JetStream default-sync (saturation)": "not measured",
	}
	for target, verdict := range want {
		if got[target].Verdict != verdict {
			t.Errorf("%s: %s (%s), want %s", target, got[target].Verdict, got[target].Measured, verdict)
		}
	}
	if v := got["durable, 100/s: publish-to-deliver p50 ≤ 0.35× JetStream always-sync"]; v.Case != "rate-100" || v.Mode != "durable" {
		t.Errorf("missed target points at %s %s, want rate-100 durable", v.Case, v.Mode)
	}

	// JetStream not sustaining a rate Fibril sustains meets the target;
	// Fibril not sustaining it misses, whatever JetStream did.
	runs[1] = run("rate-10k", "jetstream", "default-sync", false, 0, 0, 4000, 20)
	if v := Targets(runs)[0]; v.Verdict != "met" || !strings.Contains(v.Measured, "not sustained") {
		t.Errorf("JetStream not sustained: %+v", v)
	}
	runs[0] = run("rate-10k", "fibril", "buffered", false, 0, 0, 4000, 20)
	if v := Targets(runs)[0]; v.Verdict != "missed" {
		t.Errorf("Fibril not sustained: %+v", v)
	}
}

func TestMarkdownAndPlot(t *testing.T) {
	res := &Results{Runs: []Result{
		run("rate-10k", "fibril", "buffered", true, 300, 900, 10000, 10),
		run("rate-10k", "jetstream", "always-sync", false, 0, 0, 3100, 20),
		run("saturation", "fibril", "buffered", true, 0, 0, 40000, 10),
	}, Footprints: []Footprint{{Kind: "footprint", Process: "fibrild", BinaryBytes: 20 << 20, IdleRSS: 16 << 20, IdleSyncs: -1, StartupSeconds: 0.4, StartupBytes: 1 << 30}}}
	md := Markdown(res, "img/x.svg")
	for _, want := range []string{
		"| rate-10k | fibril buffered | 1 | 300 | 900 |",
		"**not sustained** in 1 of 1 runs: reached 3100/s confirmed",
		"| fibril buffered | 1 | 40000 |",
		"| fibrild | 20.0 MiB | 16.0 |",
		"0.40 s with 1024 MiB stored",
		"![publish-to-deliver latency",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	svg := LatencySVG(res.Runs)
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		if _, err := d.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("plot is not well-formed XML: %v\n%s", err, svg)
		}
	}
	if !strings.Contains(svg, "not sustained") || !strings.Contains(svg, "fibril buffered") {
		t.Errorf("plot lacks the not-sustained mark or a legend:\n%s", svg)
	}
}

func TestReadResults(t *testing.T) {
	in := `{"kind":"footprint","system":"fibril","process":"fibrild","idle_rss_bytes":5}
{"kind":"run","case":"rate-1k","system":"fibril","mode":"durable","sustained":true,"confirm":{"p50_us":7}}
{"kind":"other"}
`
	res, err := ReadResults(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 1 || len(res.Footprints) != 1 || res.Runs[0].Confirm.P50 != 7 || res.Footprints[0].IdleRSS != 5 {
		t.Fatalf("ReadResults = %+v", res)
	}
	if _, err := ReadResults(strings.NewReader("{not json\n")); err == nil {
		t.Fatal("a bad line was accepted")
	}
}

func TestRunOpenLoopLateIsNotSustained(t *testing.T) {
	s, err := Steady("rate", 200, 200*time.Millisecond, 2)
	if err != nil {
		t.Fatal(err)
	}
	slow := fakeTarget{confirmDelay: 300 * time.Millisecond}
	r, err := RunOpenLoop(context.Background(), slow, "q", s, RunOptions{Payload: 64, Warmup: 5, Grace: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Everything arrives, but after the grace period: not sustained.
	if r.Sustained || r.Confirm != nil || r.Confirmed != 40 || r.Delivered != 40 {
		t.Fatalf("late run: %+v", r)
	}
}

// A run stopped midway (the operator's Ctrl-C) is no measurement: it
// returns the interruption, not a result line that reads as a broker
// that could not keep up.
func TestRunInterruptedReportsNoResult(t *testing.T) {
	s, err := Steady("rate", 500, 2*time.Second, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopAt := func(i int) time.Duration {
		if i == 20 { // a measured publish, made after the warm-up
			cancel()
		}
		return 0
	}
	r, err := RunOpenLoop(ctx, fakeTarget{confirmDelay: time.Millisecond, slow: stopAt}, "q", s,
		RunOptions{Payload: 64, Warmup: 5})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("open loop stopped midway: err %v, result %+v", err, r)
	}

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	r, err = RunSaturation(ctx, fakeTarget{confirmDelay: time.Millisecond, slow: stopAt}, "q", 1, 2*time.Second,
		RunOptions{Payload: 64, Window: 4, Warmup: 4})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("saturation stopped midway: err %v, result %+v", err, r)
	}
}
