package daemon

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/fibril-edge/fibril/appliance/client"
)

const bridgeTOML = `
[[bridge.nats]]
name = "site"
urls = ["%s"]

[[bridge.nats.ingest]]
subject = "sensors.*.temp"
queue = "temp-{1}"

[[bridge.nats.egress]]
queue = "commands"
subject = "cmd.out"
`

func TestBridgeConfig(t *testing.T) {
	data := []byte(fmt.Sprintf(bridgeTOML, "nats://127.0.0.1:4222"))
	cfg, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if n := cfg.Bridge.NATS; len(n) != 1 || n[0].Name != "site" || len(n[0].Ingest) != 1 || n[0].Ingest[0].Queue != "temp-{1}" || len(n[0].Egress) != 1 {
		t.Fatalf("parsed %+v", cfg.Bridge)
	}
	if ps := Check(data); len(ps) != 0 {
		t.Fatalf("Check: %v", ps)
	}
	bad := strings.Replace(string(data), "temp-{1}", "temp-{2}", 1)
	ps := Check([]byte(bad))
	if len(ps) != 1 || ps[0].Key != "bridge.nats" || !strings.Contains(ps[0].Msg, "{2} but the subject has 1 wildcard") {
		t.Fatalf("Check of a bad template: %v", ps)
	}
	if _, err := Parse([]byte("[[bridge.nats]]\nurl = \"x\"\n")); err == nil || !strings.Contains(err.Error(), "bridge.nats.url") {
		t.Fatalf("unknown key: %v", err)
	}
	for _, k := range Keys() {
		if strings.HasPrefix(k.Name, "bridge.") {
			t.Errorf("bridge tables are not flag keys: %s", k.Name)
		}
	}
}

// A [[bridge.nats]] in fibril.toml runs inside Run: a core NATS message
// lands in its queue.
func TestRunBridge(t *testing.T) {
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	t.Cleanup(ns.Shutdown)

	cfg, err := Parse([]byte(fmt.Sprintf(bridgeTOML, ns.ClientURL())))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Server.Listen = "127.0.0.1:0"
	cfg.Admin.Listen = ""
	cfg.Storage.DataDir = t.TempDir()
	cfg.Storage.MinFree = 0
	addr, stop := startRun(t, cfg)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.DeclareQueue(ctx, client.Queue("temp-k7").Buffered()); err != nil {
		t.Fatal(err)
	}
	cons, err := c.Consume(ctx, "temp-k7", 10)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// The bridge subscribes in the background; publish until one arrives.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case d := <-cons.Messages():
			if v, _ := d.Header("nats-subject"); string(d.Body) != "21.5" || v != "sensors.k7.temp" {
				t.Fatalf("got %q subject %q", d.Body, v)
			}
			_ = d.Ack()
			return
		case <-tick.C:
			if err := nc.Publish("sensors.k7.temp", []byte("21.5")); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("no message from the bridge")
		}
	}
}
