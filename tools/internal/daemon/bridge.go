package daemon

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/admin"
	"github.com/fibril-edge/fibril/bridge"
)

// BridgeConfig is the [bridge] section: NATS bridges, each a
// [[bridge.nats]] table (docs/bridge.md). None by default.
type BridgeConfig struct {
	NATS []NATSBridgeConfig `toml:"nats,omitempty" flag:"-"`
}

// NATSBridgeConfig is one [[bridge.nats]]: a NATS connection with its
// ingests ([[bridge.nats.ingest]]) and egresses ([[bridge.nats.egress]]).
// The bridge reaches this fibrild on its own client listener, with the
// first of [server] tokens, over TLS when [server] serves TLS (see
// selfTLS).
type NATSBridgeConfig struct {
	Name         string             `toml:"name"`
	URLs         []string           `toml:"urls"`
	CredsFile    string             `toml:"creds_file"`
	NKeySeedFile string             `toml:"nkey_seed_file"`
	User         string             `toml:"user"`
	Password     string             `toml:"password"`
	Token        string             `toml:"token"`
	TLSCert      string             `toml:"tls_cert"`
	TLSKey       string             `toml:"tls_key"`
	TLSCA        []string           `toml:"tls_ca"`
	DrainTimeout Duration           `toml:"drain_timeout"`
	Ingest       []NATSIngestConfig `toml:"ingest"`
	Egress       []NATSEgressConfig `toml:"egress"`
}

// NATSIngestConfig is one [[bridge.nats.ingest]] (see bridge.Ingest).
type NATSIngestConfig struct {
	Subject    string   `toml:"subject"`
	Queue      string   `toml:"queue"`
	QueueGroup string   `toml:"queue_group"`
	Mode       string   `toml:"mode"`
	Stream     string   `toml:"stream"`
	Durable    string   `toml:"durable"`
	AckWait    Duration `toml:"ack_wait"`
	FetchBatch int      `toml:"fetch_batch"`
}

// NATSEgressConfig is one [[bridge.nats.egress]] (see bridge.Egress).
type NATSEgressConfig struct {
	Queue       string   `toml:"queue"`
	Subject     string   `toml:"subject"`
	JetStream   bool     `toml:"jetstream"`
	Prefetch    int      `toml:"prefetch"`
	ExtendEvery Duration `toml:"extend_every"`
}

// bridgeOptions turns one [[bridge.nats]] into bridge options for a
// broker on fibrilAddr.
func (n NATSBridgeConfig) bridgeOptions(i int, fibrilAddr, token string, log *slog.Logger) bridge.Options {
	o := bridge.Options{
		Name: n.Name, URLs: n.URLs,
		CredsFile: n.CredsFile, NKeySeedFile: n.NKeySeedFile, User: n.User, Password: n.Password, Token: n.Token,
		TLSCertFile: n.TLSCert, TLSKeyFile: n.TLSKey, TLSCAFiles: n.TLSCA,
		FibrilAddr: fibrilAddr, FibrilToken: token, DrainTimeout: time.Duration(n.DrainTimeout), Logger: log,
	}
	if o.Name == "" {
		o.Name = fmt.Sprintf("nats%d", i+1)
	}
	for _, in := range n.Ingest {
		o.Ingest = append(o.Ingest, bridge.Ingest{
			Subject: in.Subject, Queue: in.Queue, QueueGroup: in.QueueGroup, Mode: bridge.Mode(in.Mode),
			Stream: in.Stream, Durable: in.Durable, AckWait: time.Duration(in.AckWait), FetchBatch: in.FetchBatch,
		})
	}
	for _, eg := range n.Egress {
		o.Egress = append(o.Egress, bridge.Egress{Queue: eg.Queue, Subject: eg.Subject, JetStream: eg.JetStream, Prefetch: eg.Prefetch,
			ExtendEvery: time.Duration(eg.ExtendEvery)})
	}
	return o
}

// bridgeProblems checks every [[bridge.nats]] as the bridge package would.
func (c Config) bridgeProblems() []Problem {
	var problems []Problem
	for i, n := range c.Bridge.NATS {
		if err := n.bridgeOptions(i, "127.0.0.1:7420", "", nil).Validate(); err != nil {
			problems = append(problems, Problem{Key: "bridge.nats", Msg: err.Error()})
		}
	}
	return problems
}

// loopbackAddr is the address a bridge in this process dials for the
// listener on addr: its port on 127.0.0.1 when it listens on every
// interface.
func loopbackAddr(addr net.Addr) string {
	if tcp, ok := addr.(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", fmt.Sprint(tcp.Port))
	}
	return addr.String()
}

// queueExists answers bridge.Options.QueueExists from the broker.
func queueExists(b *appliance.Broker) func(string) bool {
	return func(q string) bool {
		_, err := b.QueueInfo(q)
		return !errors.Is(err, appliance.ErrNotFound)
	}
}

// runningBridges are the bridges started by Run.
type runningBridges struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	list   []*bridge.Bridge
}

// selfTLS is how a bridge in this process reaches the daemon's own TLS
// client listener, serverTLS being the listener's config: it trusts
// exactly the certificate the listener serves (pinned byte for byte) and
// nothing else, whatever names the certificate carries, so that one issued
// for the host's public name works on loopback too. nil without TLS.
func selfTLS(serverTLS *tls.Config) *tls.Config {
	if serverTLS == nil || len(serverTLS.Certificates) == 0 || len(serverTLS.Certificates[0].Certificate) == 0 {
		return nil
	}
	own := serverTLS.Certificates[0].Certificate[0]
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The usual chain and name checks are replaced by the pin in
		// VerifyConnection, which runs on every handshake.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, own) {
				return errNotOwnCert
			}
			return nil
		},
	}
}

// errNotOwnCert: the TLS listener a bridge dialled is not this daemon's.
var errNotOwnCert = errors.New("daemon: the client listener did not present this daemon's own certificate")

// startBridges starts every configured bridge against the broker on
// fibrilAddr, over TLS pinned to the listener's certificate when
// serverTLS is set; exists tells them which queues the broker has. A
// bridge whose Run fails is logged; fibrild keeps running.
func startBridges(cfg Config, fibrilAddr string, serverTLS *tls.Config, exists func(string) bool, log *slog.Logger) (*runningBridges, error) {
	ctx, cancel := context.WithCancel(context.Background())
	rb := &runningBridges{cancel: cancel}
	token := ""
	if len(cfg.Server.Tokens) > 0 {
		token = cfg.Server.Tokens[0]
	}
	fibrilTLS := selfTLS(serverTLS)
	for i, n := range cfg.Bridge.NATS {
		o := n.bridgeOptions(i, fibrilAddr, token, log.With("component", "bridge"))
		o.FibrilTLS, o.QueueExists = fibrilTLS, exists
		b, err := bridge.New(o)
		if err != nil {
			rb.stop()
			return nil, err
		}
		rb.list = append(rb.list, b)
		rb.wg.Add(1)
		go func() {
			defer rb.wg.Done()
			if err := b.Run(ctx); err != nil {
				log.Error("bridge stopped", "bridge", o.Name, "err", err)
			}
		}()
		log.Info("bridge started", "bridge", o.Name, "urls", bridge.RedactURLs(n.URLs), "ingest", len(o.Ingest), "egress", len(o.Egress))
	}
	return rb, nil
}

// stats reports every bridge's state and counters; none before they start.
func (rb *runningBridges) stats() []admin.BridgeStats {
	if rb == nil {
		return []admin.BridgeStats{}
	}
	out := make([]admin.BridgeStats, 0, len(rb.list))
	for _, b := range rb.list {
		out = append(out, admin.BridgeStats(b.Stats())) // the same fields: the admin API renders the bridge's report
	}
	return out
}

// stop ends every bridge and waits for them.
func (rb *runningBridges) stop() {
	rb.cancel()
	rb.wg.Wait()
}
