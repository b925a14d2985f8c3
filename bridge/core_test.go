package bridge

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/fibril-edge/fibril/appliance/client"
)

// Issue test 1: core ingest with a wildcard template to several queues and
// a '>' pattern to a fixed queue; headers and the subject arrive; a subject
// whose queue does not exist is dropped and counted as not_found; the
// counts are exact.
func TestCoreIngestWildcardMapping(t *testing.T) {
	ns := startNATS(t)
	addr := startBroker(t)
	fc := fibril(t, addr)
	sensors := []string{"a", "b", "c"}
	for _, s := range sensors {
		declare(t, fc, client.Queue("temp-"+s).Buffered())
	}
	declare(t, fc, client.Queue("logs").Buffered())

	br := runBridge(t, Options{
		URLs:       []string{ns.ClientURL()},
		FibrilAddr: addr,
		Ingest: []Ingest{
			{Subject: "sensors.*.temp", Queue: "temp-{1}"},
			{Subject: "logs.>", Queue: "logs", QueueGroup: "bridges"},
		},
	})
	nc, _ := connectNATS(t, ns)

	const perSensor = 200
	for i := 0; i < perSensor; i++ {
		for _, s := range sensors {
			m := nats.NewMsg("sensors." + s + ".temp")
			m.Data = []byte(fmt.Sprintf("%s-%d", s, i))
			m.Header.Set("unit", "C")
			m.Header.Add("seq", fmt.Sprint(i))
			if err := nc.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.Publish(fmt.Sprintf("logs.app%d.info", i%4), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	const unknown = 7
	for i := 0; i < unknown; i++ {
		if err := nc.Publish("sensors.zz.temp", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	// Not matching any ingest: never received.
	if err := nc.Publish("sensors.a.humidity", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	total := uint64(perSensor*len(sensors) + perSensor + unknown)
	waitFor(t, "all received and settled", func() bool {
		s := br.Stats()
		return s.Received == total && s.Published+s.Dropped["not_found"] == total
	})
	br.stop()

	s := br.Stats()
	if s.Published != total-unknown || s.Dropped["not_found"] != unknown || len(s.Dropped) != 1 || s.Duplicates != 0 || s.Retries != 0 {
		t.Errorf("stats: %+v", s)
	}
	if s.State != StateStopped {
		t.Errorf("state %q after Run returned", s.State)
	}
	for _, sensor := range sensors {
		got := drain(t, fc, "temp-"+sensor)
		if len(got) != perSensor {
			t.Fatalf("temp-%s: %d messages, want %d", sensor, len(got), perSensor)
		}
		for i, d := range got {
			if want := fmt.Sprintf("%s-%d", sensor, i); string(d.Body) != want {
				t.Fatalf("temp-%s #%d: body %q, want %q", sensor, i, d.Body, want)
			}
			if v, _ := d.Header("unit"); v != "C" {
				t.Errorf("unit header %q", v)
			}
			if v, _ := d.Header("seq"); v != fmt.Sprint(i) {
				t.Errorf("seq header %q, want %d", v, i)
			}
			if v, _ := d.Header(SubjectHeader); v != "sensors."+sensor+".temp" {
				t.Errorf("subject header %q", v)
			}
		}
	}
	logs := drain(t, fc, "logs")
	if len(logs) != perSensor {
		t.Fatalf("logs: %d messages, want %d", len(logs), perSensor)
	}
	for i, d := range logs {
		if v, _ := d.Header(SubjectHeader); v != fmt.Sprintf("logs.app%d.info", i%4) {
			t.Errorf("logs #%d subject header %q", i, v)
		}
	}
}
