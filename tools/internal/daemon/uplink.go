package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/federation"
	"github.com/fibril-edge/fibril/federation/uplink"
)

// UplinkConfig is one [[uplink]] table: local queues forwarded to a queue
// on a remote Fibril (docs/uplink.md). None by default.
type UplinkConfig struct {
	Name        string   `toml:"name"`
	Queues      []string `toml:"queues"`
	To          []string `toml:"to"`
	RemoteQueue string   `toml:"remote_queue"`
	Token       string   `toml:"token"`
	TokenFile   string   `toml:"token_file"`
	TLSCA       string   `toml:"tls_ca"`
	// Insecure lets a token go to a remote off loopback without TLS
	// (tls_ca); fibrild warns about it at every start.
	Insecure     Bool     `toml:"insecure"`
	Window       int      `toml:"window"`
	Rate         float64  `toml:"rate"`
	DedupeWindow Duration `toml:"dedupe_window"`
	// Source names this edge in every forwarded message's stable id.
	// Default: cluster.node_id, else the host name.
	Source string `toml:"source"`
}

// uplinkOptions turns one [[uplink]] into uplink options; local dials
// this fibrild's own client listener. Files (token_file, tls_ca) are read
// here, so --check-config reports them.
func (c Config) uplinkOptions(i int, local func(context.Context) (*client.Client, error), log *slog.Logger) (uplink.Options, error) {
	u := c.Uplink[i]
	o := uplink.Options{Name: u.Name, Queues: u.Queues, To: u.To, RemoteQueue: u.RemoteQueue, Token: u.Token,
		Window: u.Window, Rate: u.Rate, DedupeWindow: time.Duration(u.DedupeWindow), Source: u.Source,
		Local: local, Logger: log}
	if o.Name == "" {
		o.Name = fmt.Sprintf("uplink%d", i+1)
	}
	if o.Source == "" {
		o.Source = c.Cluster.NodeID
	}
	if o.Source == "" {
		o.Source, _ = os.Hostname()
	}
	if u.TokenFile != "" {
		tokens, err := readTokensFile(u.TokenFile) // the server's rules: one a line, not readable by all
		if err != nil || len(tokens) == 0 {
			return o, fmt.Errorf("uplink %s: token_file %s: no token (%v)", o.Name, u.TokenFile, err)
		}
		o.Token = tokens[0]
	}
	if u.TLSCA != "" {
		pem, err := os.ReadFile(u.TLSCA)
		if err != nil {
			return o, fmt.Errorf("uplink %s: tls_ca: %w", o.Name, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return o, fmt.Errorf("uplink %s: tls_ca %s holds no PEM certificate", o.Name, u.TLSCA)
		}
		o.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, CipherSuites: federation.AEADSuites}
	}
	if a := u.clearToken(); a != "" && !bool(u.Insecure) {
		return o, fmt.Errorf("uplink %s: its token would cross the network in the clear to %s: set tls_ca (TLS to the remote), or insecure = true", o.Name, a)
	}
	return o, o.Validate()
}

// clearToken returns the first remote off loopback that u's token would
// reach without TLS, or "".
func (u UplinkConfig) clearToken() string {
	if (u.Token == "" && u.TokenFile == "") || u.TLSCA != "" {
		return ""
	}
	for _, a := range u.To {
		if !IsLoopback(a) {
			return a
		}
	}
	return ""
}

// uplinkProblems checks every [[uplink]] as the uplink package would.
func (c Config) uplinkProblems() []Problem {
	var problems []Problem
	for i := range c.Uplink {
		if _, err := c.uplinkOptions(i, func(context.Context) (*client.Client, error) { return nil, nil }, nil); err != nil {
			problems = append(problems, Problem{Key: "uplink", Msg: err.Error()})
		}
	}
	return problems
}

// runningUplinks are the uplinks started by Run.
type runningUplinks struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	list   []*uplink.Uplink
}

// startUplinks starts every configured uplink; each reaches this broker on
// fibrilAddr (over TLS pinned to the listener's certificate when
// serverTLS is set) and learns its queues from b.
func startUplinks(cfg Config, fibrilAddr string, serverTLS *tls.Config, b *appliance.Broker, log *slog.Logger) (*runningUplinks, error) {
	ctx, cancel := context.WithCancel(context.Background())
	ru := &runningUplinks{cancel: cancel}
	token := ""
	if len(cfg.Server.Tokens) > 0 {
		token = cfg.Server.Tokens[0]
	}
	local := func(ctx context.Context) (*client.Client, error) {
		return client.Dial(ctx, fibrilAddr, client.Options{Token: token, TLS: selfTLS(serverTLS), ClientName: "fibril-uplink", Logger: log})
	}
	info := func(q string) (uplink.LocalQueue, bool) {
		in, err := b.QueueInfo(q)
		if err != nil {
			return uplink.LocalQueue{}, false
		}
		return uplink.LocalQueue{Durability: in.Config.Durability, Messages: in.Messages, Bytes: in.Bytes,
			AckDeadline: in.Config.AckDeadline}, true
	}
	for i := range cfg.Uplink {
		o, err := cfg.uplinkOptions(i, local, log.With("component", "uplink"))
		if err != nil {
			ru.stop()
			return nil, err
		}
		o.Info, o.ListQueues = info, b.QueueNames
		u, err := uplink.New(o)
		if err != nil {
			ru.stop()
			return nil, err
		}
		ru.list = append(ru.list, u)
		ru.wg.Go(func() {
			if err := u.Run(ctx); err != nil {
				log.Error("uplink stopped", "uplink", o.Name, "err", err)
			}
		})
		log.Info("uplink started", "uplink", o.Name, "to", o.To, "queues", o.Queues)
		if a := cfg.Uplink[i].clearToken(); a != "" {
			log.Warn("INSECURE: the uplink sends its token without TLS ([[uplink]] insecure = true): "+
				"anyone on the path can read it and publish upstream", "uplink", o.Name, "to", a)
		}
	}
	return ru, nil
}

// stats reports every uplink's state; none before they start.
func (ru *runningUplinks) stats() []uplink.Stats {
	out := []uplink.Stats{}
	if ru == nil {
		return out
	}
	for _, u := range ru.list {
		out = append(out, u.Stats())
	}
	return out
}

// stop ends every uplink and waits for them.
func (ru *runningUplinks) stop() {
	ru.cancel()
	ru.wg.Wait()
}
