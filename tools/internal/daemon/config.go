package daemon

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/fibril-edge/fibril/appliance/admin"
	"github.com/fibril-edge/fibril/appliance/server"
	"github.com/fibril-edge/fibril/appliance/wire"
	"github.com/fibril-edge/fibril/bridge"
)

// DefaultConfigPath is where an installed fibrild looks for its config.
const DefaultConfigPath = "/etc/fibril/fibril.toml"

//go:embed default.toml
var defaultTOML []byte

// DefaultTOML is the built-in config file, comments included.
func DefaultTOML() []byte { return bytes.Clone(defaultTOML) }

// Config is fibrild's configuration: fibril.toml. Every field's key is its
// section and its toml tag, such as server.listen.
type Config struct {
	Server  ServerConfig   `toml:"server"`
	Admin   AdminConfig    `toml:"admin"`
	Storage StorageConfig  `toml:"storage"`
	Log     LogConfig      `toml:"log"`
	Cluster ClusterConfig  `toml:"cluster"`
	Bridge  BridgeConfig   `toml:"bridge"`
	Uplink  []UplinkConfig `toml:"uplink,omitempty" flag:"-"`
}

// ServerConfig is the client protocol listener.
type ServerConfig struct {
	Listen string   `toml:"listen" help:"client protocol address (host:port; port 0 picks a free one)"`
	Tokens []string `toml:"tokens" help:"accepted Hello tokens, comma-separated; empty: no authentication"`
	// TokensFile adds the tokens of a file, one a line (see ResolveTokens).
	TokensFile string `toml:"tokens_file" help:"file of more tokens, one a line (blank lines and # comments skipped); must not be readable by every user"`
	// Insecure lets the client port listen off loopback without tokens;
	// the daemon warns about it at every start.
	Insecure  Bool     `toml:"insecure" help:"serve the client port off loopback without tokens (true or false; anyone who reaches it can publish, read, ack and delete)"`
	TLSCert   string   `toml:"tls_cert" help:"TLS certificate (PEM file); with tls_key, serve TLS"`
	TLSKey    string   `toml:"tls_key" help:"TLS private key (PEM file)"`
	MaxFrame  Size     `toml:"max_frame" help:"largest protocol frame, read and sent (4KiB to 1GiB)"`
	Heartbeat Duration `toml:"heartbeat" help:"heartbeat interval; a client silent for three is closed; 0s: off"`
	// MaxConnections bounds the client sessions (server.Options.MaxConnections).
	MaxConnections int `toml:"max_connections" help:"most client connections served at once; one more is refused (1 to 1000000)"`
	// MaxPreHello, MaxPreHelloPerSource and PressureHelloTimeout bound the
	// connections that have not authenticated (server.Options).
	MaxPreHello          int      `toml:"max_pre_hello" help:"most connections waiting for their Hello; past it the oldest of the busiest source is closed (1 to 1000000)"`
	MaxPreHelloPerSource int      `toml:"max_pre_hello_per_source" help:"most connections waiting for their Hello from one IPv4 address or IPv6 /64; past it that source's oldest is closed (1 to max_pre_hello)"`
	PressureHelloTimeout Duration `toml:"pressure_hello_timeout" help:"Hello timeout while more than half of max_pre_hello are waiting (1ms to 10s)"`
	// DeliveryBudget and SlowConsumerGrace bound the deliveries queued to
	// consumers on every connection together (server.Options).
	DeliveryBudget    Size     `toml:"delivery_budget" help:"most bytes of deliveries queued to consumers, all connections together; past it the slowest are paused; 0: no budget (else at least 64KiB)"`
	SlowConsumerGrace Duration `toml:"slow_consumer_grace" help:"how long a consumer paused by delivery_budget has to catch up before it is disconnected (10ms to 1h)"`
}

// AdminConfig is the admin HTTP API, metrics and dashboard (package
// appliance/admin), authenticated with the [server] tokens.
type AdminConfig struct {
	Listen string `toml:"listen" help:"admin HTTP API, /metrics and dashboard address; empty: off"`
	// Insecure lets the admin API listen off loopback without [server]
	// tokens; the daemon warns about it at every start.
	Insecure Bool `toml:"insecure" help:"serve the admin API off loopback without tokens (true or false; anyone who reaches it controls the broker)"`
	// Hosts are the names, besides localhost, IP addresses, the listen
	// address's host and the machine's name, that a request's Host header
	// may carry (admin.Options.Hosts).
	Hosts []string `toml:"hosts" help:"more names the admin API answers to in the Host header (besides localhost, IP addresses, the listen host and the host name), comma-separated"`
	// MaxConnections bounds the admin connections served at once
	// (admin.Options.MaxConnections).
	MaxConnections int `toml:"max_connections" help:"most admin connections served at once; more wait for one to close (1 to 100000)"`
	// PublishBudget bounds the publish bodies the admin API holds at once
	// (admin.Options.PublishBytesInFlight).
	PublishBudget Size   `toml:"publish_budget" help:"most bytes of publish bodies the admin API holds at once, all connections together; more wait up to 10s, then are refused as busy (1MiB to 4GiB)"`
	TLSCert       string `toml:"tls_cert" help:"TLS certificate for the admin API (PEM file); with tls_key, serve HTTPS"`
	TLSKey        string `toml:"tls_key" help:"TLS private key for the admin API (PEM file)"`
}

// StorageConfig is where and how queues are stored.
type StorageConfig struct {
	DataDir     string `toml:"data_dir" help:"directory for queue logs and metadata"`
	SegmentSize Size   `toml:"segment_size" help:"size at which a queue log starts a new segment (1MiB to 4GiB)"`
	TailCache   Size   `toml:"tail_cache" help:"recently written records kept in memory, per partition"`
	ReadCache   Size   `toml:"read_cache" help:"memory for one cache of queue log blocks for the whole node, serving readers that trail their writers past the tail cache (0 for off, or 1MiB to 1TiB)"`
	DiskBudget  Size   `toml:"disk_budget" help:"most the data directory may hold; 0: no budget"`
	MinFree     Size   `toml:"min_free" help:"refuse publishes below this much free disk; 0: off"`
	// CheckpointDelay is how long after a change a partition is
	// checkpointed (appliance.Options.CheckpointDelay).
	CheckpointDelay Duration `toml:"checkpoint_delay" help:"how long after a change a partition is checkpointed (10ms to 1h)"`
}

// LogConfig is the daemon's logging.
type LogConfig struct {
	Level  string `toml:"level" help:"log level: debug, info, warn or error"`
	Format string `toml:"format" help:"log format: text or json"`
}

// Default returns the built-in config (default.toml).
func Default() Config {
	var c Config
	if err := decodeStrict(defaultTOML, &c); err != nil {
		panic(fmt.Sprintf("daemon: built-in config does not parse: %v", err))
	}
	return c
}

// Parse reads a config file's contents over the built-in defaults: keys the
// file leaves out keep their default. An unknown key is an error that
// names it.
func Parse(data []byte) (Config, error) {
	c := Default()
	if err := decodeStrict(data, &c); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Load reads the config file at path over the built-in defaults.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

func decodeStrict(data []byte, c *Config) error {
	err := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields().Decode(c)
	var missing *toml.StrictMissingError
	var decodeErr *toml.DecodeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &missing):
		var keys []string
		for _, e := range missing.Errors {
			row, _ := e.Position()
			keys = append(keys, fmt.Sprintf("%s (line %d)", strings.Join(e.Key(), "."), row))
		}
		return fmt.Errorf("unknown key %s", strings.Join(keys, ", "))
	case errors.As(err, &decodeErr):
		row, col := decodeErr.Position()
		if key := strings.Join(decodeErr.Key(), "."); key != "" {
			return fmt.Errorf("%s (line %d, column %d): %w", key, row, col, err)
		}
		return fmt.Errorf("line %d, column %d: %w", row, col, err)
	}
	return err
}

// WriteTOML writes the config as TOML, with tokens and bridge passwords
// (and the credentials in bridge URLs) redacted.
func (c Config) WriteTOML(w io.Writer) error {
	redacted := make([]string, len(c.Server.Tokens)) // never nil: prints tokens = []
	for i := range redacted {
		redacted[i] = "<redacted>"
	}
	c.Server.Tokens = redacted
	c.Bridge.NATS = append([]NATSBridgeConfig(nil), c.Bridge.NATS...)
	for i := range c.Bridge.NATS {
		n := &c.Bridge.NATS[i]
		n.URLs = bridge.RedactURLs(n.URLs) // a URL may carry user:password@
		if n.Password != "" {
			n.Password = "<redacted>"
		}
		if n.Token != "" {
			n.Token = "<redacted>"
		}
	}
	c.Uplink = append([]UplinkConfig(nil), c.Uplink...)
	for i := range c.Uplink {
		if c.Uplink[i].Token != "" {
			c.Uplink[i].Token = "<redacted>"
		}
	}
	return toml.NewEncoder(w).Encode(c)
}

// Validate reports every value out of range, naming its key.
func (c Config) Validate() error {
	var errs []error
	for _, p := range c.valueProblems() {
		errs = append(errs, fmt.Errorf("%s: %s", p.Key, p.Msg))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid config: %w", err)
	}
	return nil
}

// valueProblems lists every value out of range; Line is left 0.
func (c Config) valueProblems() []Problem {
	var problems []Problem
	bad := func(key, format string, args ...any) {
		problems = append(problems, Problem{Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	checkAddr := func(key, addr string) {
		if !validHostPort(addr) {
			bad(key, "%q is not a host:port address (port 0 to 65535)", addr)
		}
	}
	// Sizes are never negative (a TOML integer skips the text parser).
	walkKeys(reflect.ValueOf(c), func(name string, _ reflect.StructField, v reflect.Value) {
		if v.Type() == reflect.TypeFor[Size]() && v.Int() < 0 {
			bad(name, "%d is negative: a size is 0 or more bytes", v.Int())
		}
	})
	s := c.Server
	checkAddr("server.listen", s.Listen)
	for i, t := range s.Tokens {
		if t == "" || len(t) > 65535 {
			bad("server.tokens", "token %d is empty or longer than 65535 bytes", i+1)
		}
	}
	if (s.TLSCert == "") != (s.TLSKey == "") {
		bad("server.tls_cert", "tls_cert and tls_key go together: set both or neither")
	}
	if s.MaxFrame != 0 && (s.MaxFrame < wire.MinFrameLimit || s.MaxFrame > wire.MaxFrameLimit) {
		bad("server.max_frame", "%v is out of range (4KiB to 1GiB)", s.MaxFrame)
	}
	if hb := time.Duration(s.Heartbeat); hb != 0 && (hb < time.Millisecond || hb > time.Hour) {
		bad("server.heartbeat", "%v is out of range (1ms to 1h, or 0s for off)", hb)
	}
	if s.MaxConnections < 1 || s.MaxConnections > 1_000_000 {
		bad("server.max_connections", "%d is out of range (1 to 1000000)", s.MaxConnections)
	}
	if s.MaxPreHello < 1 || s.MaxPreHello > server.MaxPreHelloLimit {
		bad("server.max_pre_hello", "%d is out of range (1 to %d)", s.MaxPreHello, server.MaxPreHelloLimit)
	}
	if s.MaxPreHelloPerSource < 1 || s.MaxPreHelloPerSource > max(s.MaxPreHello, 1) {
		bad("server.max_pre_hello_per_source", "%d is out of range (1 to max_pre_hello, %d)", s.MaxPreHelloPerSource, s.MaxPreHello)
	}
	if d := time.Duration(s.PressureHelloTimeout); d < time.Millisecond || d > 10*time.Second {
		bad("server.pressure_hello_timeout", "%v is out of range (1ms to 10s)", d)
	}
	if s.DeliveryBudget != 0 && s.DeliveryBudget < server.MinDeliveryBudget {
		bad("server.delivery_budget", "%v is below 64KiB (0 turns the budget off)", s.DeliveryBudget)
	}
	if d := time.Duration(s.SlowConsumerGrace); d < 10*time.Millisecond || d > time.Hour {
		bad("server.slow_consumer_grace", "%v is out of range (10ms to 1h)", d)
	}
	a := c.Admin
	if a.Listen != "" {
		checkAddr("admin.listen", a.Listen)
	}
	if err := (admin.Options{Hosts: a.Hosts}).Validate(); err != nil {
		bad("admin.hosts", "%s", strings.TrimPrefix(err.Error(), "admin: "))
	}
	if a.MaxConnections < 1 || a.MaxConnections > 100_000 {
		bad("admin.max_connections", "%d is out of range (1 to 100000)", a.MaxConnections)
	}
	if a.PublishBudget < 1<<20 || a.PublishBudget > 4<<30 {
		bad("admin.publish_budget", "%v is out of range (1MiB to 4GiB)", a.PublishBudget)
	}
	if (a.TLSCert == "") != (a.TLSKey == "") {
		bad("admin.tls_cert", "tls_cert and tls_key go together: set both or neither")
	}
	st := c.Storage
	if st.DataDir == "" {
		bad("storage.data_dir", "must be set")
	}
	if st.SegmentSize != 0 && (st.SegmentSize < 1<<20 || st.SegmentSize > 4<<30) {
		bad("storage.segment_size", "%v is out of range (1MiB to 4GiB)", st.SegmentSize)
	}
	if st.ReadCache != 0 && (st.ReadCache < 1<<20 || st.ReadCache > 1<<40) {
		bad("storage.read_cache", "%v is out of range (0 for off, or 1MiB to 1TiB)", st.ReadCache)
	}
	if d := time.Duration(st.CheckpointDelay); d != 0 && (d < 10*time.Millisecond || d > time.Hour) {
		bad("storage.checkpoint_delay", "%v is out of range (10ms to 1h)", d)
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "%q (want debug, info, warn or error)", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		bad("log.format", "%q (want text or json)", c.Log.Format)
	}
	// A tokens_file counts as tokens here; ResolveTokens refuses one that
	// holds none.
	if validHostPort(s.Listen) && !IsLoopback(s.Listen) && len(s.Tokens) == 0 && s.TokensFile == "" && !bool(s.Insecure) {
		bad("server.listen", "%s is off loopback: the client port needs [server] tokens (or tokens_file, or the systemd credential %q) there, or [server] insecure = true", s.Listen, CredentialName)
	}
	if a.Listen != "" && !IsLoopback(a.Listen) && len(s.Tokens) == 0 && s.TokensFile == "" && !bool(a.Insecure) {
		bad("admin.listen", "%s is off loopback: the admin API needs [server] tokens (or tokens_file, or the systemd credential %q) there, or [admin] insecure = true", a.Listen, CredentialName)
	}
	problems = append(problems, c.clusterProblems()...)
	problems = append(problems, c.bridgeProblems()...)
	return append(problems, c.uplinkProblems()...)
}

// validHostPort reports whether addr is host:port with a numeric port
// from 0 to 65535 (0: pick a free one).
func validHostPort(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 0 && n <= 65535
}
