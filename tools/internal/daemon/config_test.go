package daemon

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDefault(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("built-in config: %v", err)
	}
	want := Config{
		Server: ServerConfig{Listen: "127.0.0.1:7420", Tokens: []string{}, MaxFrame: 16 << 20, Heartbeat: Duration(10 * time.Second),
			MaxConnections: 1024, MaxPreHello: 256, MaxPreHelloPerSource: 64, PressureHelloTimeout: Duration(time.Second),
			DeliveryBudget: 256 << 20, SlowConsumerGrace: Duration(5 * time.Second)},
		Admin: AdminConfig{Listen: "127.0.0.1:7421", Hosts: []string{}, MaxConnections: 64, PublishBudget: 64 << 20},
		Storage: StorageConfig{DataDir: "./data", SegmentSize: 16 << 20, TailCache: 1 << 20, ReadCache: 32 << 20,
			MinFree: 64 << 20, CheckpointDelay: Duration(30 * time.Second)},
		Log:     LogConfig{Level: "info", Format: "text"},
		Cluster: ClusterConfig{Peers: []string{}},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("built-in config\n got %+v\nwant %+v", c, want)
	}
}

func TestParseOverDefaults(t *testing.T) {
	c, err := Parse([]byte(`
[server]
listen = "0.0.0.0:7000"
tokens = ["a", "b"]

[storage]
segment_size = "256MiB"
disk_budget = 1073741824
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.Listen != "0.0.0.0:7000" || len(c.Server.Tokens) != 2 || c.Storage.SegmentSize != 256<<20 ||
		c.Storage.DiskBudget != 1<<30 {
		t.Fatalf("parsed %+v", c)
	}
	// Keys the file leaves out keep the built-in values.
	if c.Storage.DataDir != "./data" || c.Log.Level != "info" || c.Server.Heartbeat != Duration(10*time.Second) {
		t.Fatalf("defaults lost: %+v", c)
	}
}

func TestParseErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"[server]\nlistn = \"x\"\n", "unknown key server.listn (line 2)"},
		{"[sever]\nlisten = \"x\"\n", "unknown key sever"},
		{"top = 1\n", "unknown key top"},
		{"[storage]\nsegment_size = \"64 parsecs\"\n", "storage.segment_size"},
		{"[server]\nheartbeat = \"soon\"\n", "server.heartbeat"},
		{"[server]\nlisten = 7420\n", "server.listen"},
		{"[server\n", "line 1"},
	} {
		_, err := Parse([]byte(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error mentioning %q", tc.file, err, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		key    string
		mutate func(*Config)
	}{
		{"server.listen", func(c *Config) { c.Server.Listen = "localhost" }},
		{"server.tokens", func(c *Config) { c.Server.Tokens = []string{""} }},
		{"server.tls_cert", func(c *Config) { c.Server.TLSCert = "cert.pem" }},
		{"server.max_frame", func(c *Config) { c.Server.MaxFrame = 100 }},
		{"server.heartbeat", func(c *Config) { c.Server.Heartbeat = Duration(time.Microsecond) }},
		{"server.max_connections", func(c *Config) { c.Server.MaxConnections = 0 }},
		{"server.max_pre_hello", func(c *Config) { c.Server.MaxPreHello = 0 }},
		{"server.max_pre_hello_per_source", func(c *Config) { c.Server.MaxPreHelloPerSource = 300 }}, // above max_pre_hello
		{"server.pressure_hello_timeout", func(c *Config) { c.Server.PressureHelloTimeout = 0 }},
		{"server.delivery_budget", func(c *Config) { c.Server.DeliveryBudget = 1000 }},
		{"server.slow_consumer_grace", func(c *Config) { c.Server.SlowConsumerGrace = Duration(time.Microsecond) }},
		{"admin.listen", func(c *Config) { c.Admin.Listen = "nowhere" }},
		{"admin.listen", func(c *Config) { c.Admin.Listen = "0.0.0.0:7421" }}, // off loopback without tokens
		{"admin.hosts", func(c *Config) { c.Admin.Hosts = []string{"fibril.lan:7421"} }},
		{"admin.hosts", func(c *Config) { c.Admin.Hosts = []string{""} }},
		{"admin.max_connections", func(c *Config) { c.Admin.MaxConnections = 0 }},
		{"admin.publish_budget", func(c *Config) { c.Admin.PublishBudget = 512 << 10 }},
		{"admin.tls_cert", func(c *Config) { c.Admin.TLSKey = "key.pem" }},
		{"storage.data_dir", func(c *Config) { c.Storage.DataDir = "" }},
		{"storage.segment_size", func(c *Config) { c.Storage.SegmentSize = 4096 }},
		{"storage.read_cache", func(c *Config) { c.Storage.ReadCache = 64 << 10 }},
		{"log.level", func(c *Config) { c.Log.Level = "loud" }},
		{"log.format", func(c *Config) { c.Log.Format = "xml" }},
	} {
		c := Default()
		tc.mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s: got %v", tc.key, err)
		}
	}
	c := Default()
	c.Server.Heartbeat = 0
	c.Server.MaxFrame = 0
	if err := c.Validate(); err != nil {
		t.Errorf("zero heartbeat and max frame: %v", err)
	}
	c = Default()
	c.Admin.Listen, c.Server.TokensFile = "0.0.0.0:7421", "/etc/fibril/tokens"
	if err := c.Validate(); err != nil {
		t.Errorf("admin off loopback with a tokens_file: %v", err)
	}
}

func TestSetEveryKey(t *testing.T) {
	keys := Keys()
	if len(keys) != 43 {
		t.Fatalf("%d keys: %v", len(keys), keys)
	}
	values := map[string]string{
		"server.listen": "127.0.0.1:0", "server.tokens": "a, b,", "server.tokens_file": "/etc/fibril/tokens", "server.tls_cert": "c.pem", "server.insecure": "true",
		"server.tls_key": "k.pem", "server.max_frame": "1MiB", "server.heartbeat": "2s", "server.max_connections": "16",
		"server.max_pre_hello": "32", "server.max_pre_hello_per_source": "8", "server.pressure_hello_timeout": "250ms",
		"server.delivery_budget": "8MiB", "server.slow_consumer_grace": "2s",
		"admin.listen": "127.0.0.1:0", "admin.insecure": "true", "admin.hosts": "fibril.lan, gw", "admin.max_connections": "8", "admin.publish_budget": "2MiB",
		"admin.tls_cert": "a.pem", "admin.tls_key": "ak.pem", "storage.data_dir": "/tmp/x", "storage.segment_size": "8MiB",
		"storage.tail_cache": "4KiB", "storage.read_cache": "0", "storage.disk_budget": "10GB", "storage.min_free": "0",
		"storage.checkpoint_delay": "200ms", "log.level": "debug", "log.format": "json",
		"cluster.node_id": "n1", "cluster.listen": "127.0.0.1:7422", "cluster.advertise": "10.0.0.1:7422",
		"cluster.peers": "n2@10.0.0.2:7422, n3@10.0.0.3:7422", "cluster.bootstrap": "true", "cluster.non_voter": "false",
		"cluster.tls_cert": "c.pem", "cluster.tls_key": "k.pem", "cluster.tls_ca": "ca.pem", "cluster.default_policy": "replica_buffered:2", "cluster.insecure": "true",
		"cluster.failover_timeout": "1500ms", "cluster.follower_hold": "2h",
	}
	var c Config
	for _, k := range keys {
		if k.Help == "" {
			t.Errorf("%s has no help text", k.Name)
		}
		v, ok := values[k.Name]
		if !ok {
			t.Fatalf("no test value for %s", k.Name)
		}
		if err := c.Set(k.Name, v); err != nil {
			t.Fatalf("set %s: %v", k.Name, err)
		}
	}
	want := Config{
		Server: ServerConfig{Listen: "127.0.0.1:0", Tokens: []string{"a", "b"}, TokensFile: "/etc/fibril/tokens", Insecure: true, TLSCert: "c.pem", TLSKey: "k.pem",
			MaxFrame: 1 << 20, Heartbeat: Duration(2 * time.Second), MaxConnections: 16,
			MaxPreHello: 32, MaxPreHelloPerSource: 8, PressureHelloTimeout: Duration(250 * time.Millisecond),
			DeliveryBudget: 8 << 20, SlowConsumerGrace: Duration(2 * time.Second)},
		Admin: AdminConfig{Listen: "127.0.0.1:0", Insecure: true, Hosts: []string{"fibril.lan", "gw"}, MaxConnections: 8,
			PublishBudget: 2 << 20, TLSCert: "a.pem", TLSKey: "ak.pem"},
		Storage: StorageConfig{DataDir: "/tmp/x", SegmentSize: 8 << 20, TailCache: 4 << 10, DiskBudget: 10e9,
			CheckpointDelay: Duration(200 * time.Millisecond)},
		Log: LogConfig{Level: "debug", Format: "json"},
		Cluster: ClusterConfig{NodeID: "n1", Listen: "127.0.0.1:7422", Advertise: "10.0.0.1:7422",
			Peers: []string{"n2@10.0.0.2:7422", "n3@10.0.0.3:7422"}, Bootstrap: true,
			TLSCert: "c.pem", TLSKey: "k.pem", TLSCA: "ca.pem", DefaultPolicy: "replica_buffered:2", Insecure: true,
			FailoverTimeout: Duration(1500 * time.Millisecond), FollowerHold: Duration(2 * time.Hour)},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("after Set\n got %+v\nwant %+v", c, want)
	}
	if err := c.Set("server.port", "1"); err == nil {
		t.Error("Set accepted an unknown key")
	}
	if err := c.Set("storage.tail_cache", "lots"); err == nil || !strings.Contains(err.Error(), "storage.tail_cache") {
		t.Errorf("bad size: %v", err)
	}
	// Defaults, as flags show them.
	for _, k := range keys {
		if k.Name == "storage.segment_size" && k.Default != "16MiB" {
			t.Errorf("segment_size default %q", k.Default)
		}
	}
}

func TestWriteTOMLRoundTrip(t *testing.T) {
	c := Default()
	c.Server.Tokens = []string{"secret"}
	c.Storage.DiskBudget = 3 << 30
	var buf bytes.Buffer
	if err := c.WriteTOML(&buf); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "secret") {
		t.Fatalf("token printed:\n%s", buf.String())
	}
	if c.Server.Tokens[0] != "secret" {
		t.Fatal("WriteTOML changed the config it printed")
	}
	back, err := Parse(buf.Bytes())
	if err != nil {
		t.Fatalf("printed config does not parse: %v\n%s", err, buf.String())
	}
	back.Server.Tokens = c.Server.Tokens
	if !reflect.DeepEqual(back, c) {
		t.Fatalf("round trip\n got %+v\nwant %+v\n%s", back, c, buf.String())
	}
}

// A bridge URL's user:password@ is a secret like the bridge's password:
// --print-config leaves it out.
func TestWriteTOMLRedactsURLCredentials(t *testing.T) {
	c := Default()
	c.Bridge.NATS = []NATSBridgeConfig{{Name: "b", URLs: []string{"nats://alice:s3cret@10.0.0.9:4222", "bob:hunter2@10.0.0.8:4222"}}}
	var sb strings.Builder
	if err := c.WriteTOML(&sb); err != nil {
		t.Fatal(err)
	}
	if out := sb.String(); strings.Contains(out, "s3cret") || strings.Contains(out, "hunter2") || !strings.Contains(out, "10.0.0.9:4222") {
		t.Fatalf("printed config: want the URLs without their credentials:\n%s", out)
	}
	if c.Bridge.NATS[0].URLs[0] != "nats://alice:s3cret@10.0.0.9:4222" {
		t.Fatal("WriteTOML changed the config it printed")
	}
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Size
	}{
		{"0", 0}, {"4096", 4096}, {"64MiB", 64 << 20}, {"64 MiB", 64 << 20}, {"1kib", 1024},
		{"1GB", 1e9}, {"7B", 7}, {"2TiB", 2 << 40}, {"1_048_576", 1 << 20},
	} {
		got, err := ParseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "1.5MiB", "12 parsecs", "99999999999TiB"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) accepted it", in)
		}
	}
	for _, s := range []Size{0, 1, 1023, 1024, 3 << 20, 5 << 30, 1e9} {
		back, err := ParseSize(s.String())
		if err != nil || back != s {
			t.Errorf("%d prints as %q, which reads back as %d, %v", int64(s), s, back, err)
		}
	}
}
