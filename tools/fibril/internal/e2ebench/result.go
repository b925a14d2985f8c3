package e2ebench

import (
	"slices"
	"time"

	"github.com/fibril-edge/fibril/tools/fibril/internal/benchutil"
)

// Env is where a run happened: the machine, and the fsync floor of the
// disk under the brokers' data (fibril doctor's measurement).
type Env struct {
	benchutil.Env
	FsyncP50 float64 `json:"fsync_floor_p50_us"`
}

// Latency is a latency distribution in microseconds, nearest rank.
type Latency struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_us"`
	P99  float64 `json:"p99_us"`
	P999 float64 `json:"p999_us"`
	Max  float64 `json:"max_us"`
}

// summarize sorts samples in place and summarises them.
func summarize(samples []time.Duration) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	s := benchutil.Summarize(samples)
	return Latency{N: s.N, P50: benchutil.Micros(s.P50), P99: benchutil.Micros(s.P99),
		P999: benchutil.Micros(s.P999), Max: benchutil.Micros(slices.Max(samples))}
}

// Usage is what the broker process spent on one run, from its own
// accounting in /proc.
type Usage struct {
	CPUSeconds        float64 `json:"cpu_seconds"`
	CPUPerMillion     float64 `json:"cpu_seconds_per_million"`
	PeakRSS           int64   `json:"peak_rss_bytes"`
	WriteBytes        uint64  `json:"write_bytes"`
	WrittenPerPayload float64 `json:"written_per_payload_byte"`
	Wakeups           uint64  `json:"context_switches"`
}

// Result is one run of one case on one Target: a JSON line.
type Result struct {
	Kind       string  `json:"kind"` // "run"
	Case       string  `json:"case"`
	System     string  `json:"system"`
	Mode       string  `json:"mode"`
	Run        int     `json:"run"`   // 1, 2, 3, ...
	Order      int     `json:"order"` // position among the targets in this run (ABBA)
	TargetRate float64 `json:"target_per_sec,omitempty"`
	Seconds    float64 `json:"seconds"`
	Publishers int     `json:"publishers"`
	Window     int     `json:"window"`
	Payload    int     `json:"payload"`
	Sent       int     `json:"sent"`
	Confirmed  int     `json:"confirmed"`
	Delivered  int     `json:"delivered"`
	Failed     int     `json:"failed"`
	// FirstError is the first refused or failed publish, if any.
	FirstError string `json:"first_error,omitempty"`
	// Sustained: every message was confirmed and delivered no later than
	// the grace period after the schedule ended. Only then are the
	// latencies reported.
	Sustained       bool    `json:"sustained"`
	ConfirmedPerSec float64 `json:"confirmed_per_sec"`
	DeliveredPerSec float64 `json:"delivered_per_sec"`
	// SendLag is how late the publishers sent, against the schedule: the
	// bench's own share of every latency (the same for every system).
	SendLag *Latency `json:"send_lag,omitempty"`
	Confirm *Latency `json:"confirm,omitempty"`
	Deliver *Latency `json:"deliver,omitempty"`
	// Receive runs from the intended send time to when the broker took
	// the publish (its owner, in a cluster), ReceiveToDeliver from then
	// to the delivery at the consumer: Deliver split in two. Only when
	// the broker says when it took each publish (fibril from protocol
	// version 6, JetStream's stored time), on the bench's clock.
	Receive          *Latency `json:"receive,omitempty"`
	ReceiveToDeliver *Latency `json:"receive_to_deliver,omitempty"`
	Broker           *Usage   `json:"broker,omitempty"`
	Env              Env      `json:"env"`
}

// Label is "system mode", e.g. "fibril durable".
func (r Result) Label() string { return r.System + " " + r.Mode }

// usage turns two samples around a run into its Usage.
func usage(before, after ProcSample, messages, payload int) *Usage {
	u := &Usage{
		CPUSeconds: (after.CPU - before.CPU).Seconds(),
		PeakRSS:    after.PeakRSS,
		WriteBytes: after.WriteBytes - before.WriteBytes,
		Wakeups:    after.CtxSwitches - before.CtxSwitches,
	}
	if messages > 0 {
		u.CPUPerMillion = u.CPUSeconds / float64(messages) * 1e6
		u.WrittenPerPayload = float64(u.WriteBytes) / float64(messages*payload)
	}
	return u
}
