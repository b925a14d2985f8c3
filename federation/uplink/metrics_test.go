package uplink

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// The collector exports each uplink's state and each forwarded queue's
// figures under the uplink's and queue's names, and passes promtool's
// lint rules.
func TestCollectorExportsEveryQueue(t *testing.T) {
	confirmed := time.Unix(1_700_000_000, 0)
	stats := []Stats{{Name: "to-hq", State: StateBackingOff, Queues: []QueueStats{
		{Local: "sensors", Remote: "site7-sensors", State: StateBackingOff, Weakened: true, BacklogMessages: 12, BacklogBytes: 1200,
			OldestWaiting: 1500 * time.Millisecond, InFlight: 3, Forwarded: 40, Resent: 2, LastConfirm: confirmed},
		{Local: "alarms", State: StateWaiting, BacklogMessages: -1},
	}}}
	c := Collector(func() []Stats { return stats })
	got := gather(t, c)
	for series, want := range map[string]float64{
		`fibril_uplink_state{state="backing off",uplink="to-hq"}`:                       1,
		`fibril_uplink_state{state="connected",uplink="to-hq"}`:                         0,
		`fibril_uplink_queue_state{queue="alarms",state="waiting",uplink="to-hq"}`:      1,
		`fibril_uplink_queue_state{queue="sensors",state="backing off",uplink="to-hq"}`: 1,
		`fibril_uplink_weakened{queue="sensors",uplink="to-hq"}`:                        1,
		`fibril_uplink_weakened{queue="alarms",uplink="to-hq"}`:                         0,
		`fibril_uplink_backlog_messages{queue="sensors",uplink="to-hq"}`:                12,
		`fibril_uplink_backlog_bytes{queue="sensors",uplink="to-hq"}`:                   1200,
		`fibril_uplink_oldest_waiting_seconds{queue="sensors",uplink="to-hq"}`:          1.5,
		`fibril_uplink_in_flight{queue="sensors",uplink="to-hq"}`:                       3,
		`fibril_uplink_forwarded_total{queue="sensors",uplink="to-hq"}`:                 40,
		`fibril_uplink_resent_total{queue="sensors",uplink="to-hq"}`:                    2,
		`fibril_uplink_forwarded_total{queue="alarms",uplink="to-hq"}`:                  0,
		`fibril_uplink_last_confirm_timestamp_seconds{queue="sensors",uplink="to-hq"}`:  1.7e9,
	} {
		if v, ok := got[series]; !ok || v != want {
			t.Errorf("%s = %v (exported: %v), want %v", series, v, ok, want)
		}
	}
	// Unknown figures are left out rather than exported as zero.
	for _, series := range []string{
		`fibril_uplink_backlog_messages{queue="alarms",uplink="to-hq"}`,
		`fibril_uplink_last_confirm_timestamp_seconds{queue="alarms",uplink="to-hq"}`,
	} {
		if v, ok := got[series]; ok {
			t.Errorf("%s exported as %v; it is not known", series, v)
		}
	}
}

// gather collects c, checks it against promtool's lint rules, and
// returns a map from each series (name and sorted labels,
// as the text format writes them) to its value.
func gather(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(families).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() { // sorted by name
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			out[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	return out
}
