package bridge

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	base := func() Options {
		return Options{URLs: []string{"nats://127.0.0.1:4222"}, FibrilAddr: "127.0.0.1:7420",
			Ingest: []Ingest{{Subject: "sensors.*.temp", Queue: "temp-{1}"}}}
	}
	tests := []struct {
		name   string
		change func(o *Options)
		want   string // "" for valid
	}{
		{"ok", func(o *Options) {}, ""},
		{"ok jetstream whole stream", func(o *Options) {
			o.Ingest = []Ingest{{Mode: JetStream, Stream: "S", Queue: "q"}}
		}, ""},
		{"ok tail wildcard", func(o *Options) { o.Ingest[0] = Ingest{Subject: "a.>", Queue: "x-{1}"} }, ""},
		{"ok egress only", func(o *Options) {
			o.Ingest = nil
			o.Egress = []Egress{{Queue: "q", Subject: "out.q", JetStream: true}}
		}, ""},
		{"no url", func(o *Options) { o.URLs = nil }, "no NATS URL"},
		{"no fibril", func(o *Options) { o.FibrilAddr = "" }, "no Fibril address"},
		{"nothing", func(o *Options) { o.Ingest = nil }, "neither ingest nor egress"},
		{"empty token", func(o *Options) { o.Ingest[0].Subject = "a..b" }, "empty token"},
		{"gt not last", func(o *Options) { o.Ingest[0].Subject = "a.>.b" }, "'>' must be the last token"},
		{"mixed wildcard", func(o *Options) { o.Ingest[0].Subject = "a.b*" }, "mixes a wildcard"},
		{"space", func(o *Options) { o.Ingest[0].Subject = "a b" }, "white space"},
		{"template too high", func(o *Options) { o.Ingest[0].Queue = "t-{2}" }, "{2} but the subject has 1 wildcard"},
		{"template zero", func(o *Options) { o.Ingest[0].Queue = "t-{0}" }, "not a wildcard number"},
		{"template open", func(o *Options) { o.Ingest[0].Queue = "t-{1" }, "'{' without '}'"},
		{"template close", func(o *Options) { o.Ingest[0].Queue = "t-}" }, "'}' without '{'"},
		{"no queue", func(o *Options) { o.Ingest[0].Queue = "" }, "empty queue template"},
		{"bad mode", func(o *Options) { o.Ingest[0].Mode = "push" }, "neither"},
		{"jetstream no stream", func(o *Options) { o.Ingest[0].Mode = JetStream }, "needs a stream"},
		{"core with stream", func(o *Options) { o.Ingest[0].Stream = "S" }, "needs mode"},
		{"jetstream group", func(o *Options) {
			o.Ingest[0] = Ingest{Mode: JetStream, Stream: "S", Subject: "a.*", Queue: "q", QueueGroup: "g"}
		}, "queue group is for core"},
		{"jetstream no subject template", func(o *Options) {
			o.Ingest[0] = Ingest{Mode: JetStream, Stream: "S", Queue: "q-{1}"}
		}, "has 0 wildcard"},
		{"egress wildcard", func(o *Options) { o.Egress = []Egress{{Queue: "q", Subject: "out.*"}} }, "wildcards are not allowed"},
		{"egress no queue", func(o *Options) { o.Egress = []Egress{{Subject: "out"}} }, "no queue"},
		{"egress extends too often", func(o *Options) { o.Egress = []Egress{{Queue: "q", Subject: "out", ExtendEvery: time.Millisecond}} }, "extend_every 1ms is out of range"},
		{"egress extends never", func(o *Options) { o.Egress = []Egress{{Queue: "q", Subject: "out", ExtendEvery: -time.Second}} }, "extend_every -1s is negative"},
		{"negative drain", func(o *Options) { o.DrainTimeout = -time.Second }, "drain timeout -1s is negative"},
		{"cert without key", func(o *Options) { o.TLSCertFile = "c.pem" }, "certificate and key"},
		{"creds and seed", func(o *Options) { o.CredsFile, o.NKeySeedFile = "a", "b" }, "exclude each other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := base()
			tt.change(&o)
			err := o.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate: %v, want ErrInvalid with %q", err, tt.want)
			}
		})
	}
}

func TestMapping(t *testing.T) {
	tests := []struct {
		pattern, tmpl, subject, want string
	}{
		{"sensors.*.temp", "temp-{1}", "sensors.k7.temp", "temp-k7"},
		{"sensors.*.temp", "temp-{1}", "sensors.k7.hum", ""},
		{"sensors.*.temp", "temp-{1}", "sensors.k7.temp.x", ""},
		{"*.*", "{2}-{1}", "a.b", "b-a"},
		{"logs.>", "logs-{1}", "logs.a.b", "logs-a.b"},
		{"logs.>", "logs-{1}", "logs", ""},
		{"logs.>", "all", "logs.x", "all"},
	}
	for _, tt := range tests {
		tm, err := parseTemplate(tt.tmpl, wildcardCount(tt.pattern))
		if err != nil {
			t.Fatalf("%s: %v", tt.tmpl, err)
		}
		in := Ingest{Subject: tt.pattern, tmpl: tm}
		if got := in.queueFor(tt.subject); got != tt.want {
			t.Errorf("%s %s %s: %q, want %q", tt.pattern, tt.tmpl, tt.subject, got, tt.want)
		}
	}
}

// Stats say what a bridge is configured to move, and never the
// credentials a NATS URL carries.
func TestStatsDescribeTheConfig(t *testing.T) {
	b, err := New(Options{URLs: []string{"nats://alice:s3cret@127.0.0.1:4222,tls://127.0.0.1:4223", "bob:pw@127.0.0.1:4224"},
		FibrilAddr: "127.0.0.1:7420",
		Ingest: []Ingest{{Subject: "orders.>", Queue: "orders", Mode: JetStream, Stream: "ORDERS"},
			{Subject: "sensors.*.temp", Queue: "temp-{1}", QueueGroup: "site"}},
		Egress: []Egress{{Queue: "alerts", Subject: "site.alerts", JetStream: true}}})
	if err != nil {
		t.Fatal(err)
	}
	s := b.Stats()
	wantURLs := []string{"nats://127.0.0.1:4222", "tls://127.0.0.1:4223", "127.0.0.1:4224"}
	wantRoutes := []string{
		"ingest NATS orders.> → queue orders (JetStream stream ORDERS, consumer fibril-bridge)",
		"ingest NATS sensors.*.temp → queue temp-{1} (core, queue group site)",
		"egress queue alerts → NATS site.alerts (JetStream)",
	}
	if fmt.Sprint(s.URLs) != fmt.Sprint(wantURLs) || fmt.Sprint(s.Routes) != fmt.Sprint(wantRoutes) {
		t.Fatalf("urls %q\nroutes %q", s.URLs, s.Routes)
	}
	for _, u := range s.URLs {
		if strings.Contains(u, "s3cret") || strings.Contains(u, "pw") {
			t.Fatalf("a credential in %q", u)
		}
	}
}
