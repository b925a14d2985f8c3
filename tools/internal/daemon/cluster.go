package daemon

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/appliance/server"
	"github.com/fibril-edge/fibril/federation"
	"github.com/fibril-edge/fibril/federation/control"
	"github.com/fibril-edge/fibril/wal"
)

// ClusterConfig joins fibrild to a cluster (package federation). With an
// empty listen the node runs solo and the other keys are ignored.
type ClusterConfig struct {
	NodeID    string   `toml:"node_id" help:"this node's id in the cluster; default the host name"`
	Listen    string   `toml:"listen" help:"cluster port for raft, control requests and replication; empty: a solo node"`
	Advertise string   `toml:"advertise" help:"cluster address peers dial; default the listen address"`
	Peers     []string `toml:"peers" help:"the other voters as id@host:port, comma-separated"`
	Bootstrap Bool     `toml:"bootstrap" help:"form the cluster from this node and peers on its first start (true or false)"`
	NonVoter  Bool     `toml:"non_voter" help:"host replicas without a vote in the control plane (true or false)"`
	TLSCert   string   `toml:"tls_cert" help:"cluster port TLS certificate (PEM file); with tls_key and tls_ca, mutual TLS between nodes"`
	TLSKey    string   `toml:"tls_key" help:"cluster port TLS private key (PEM file)"`
	TLSCA     string   `toml:"tls_ca" help:"CA bundle (PEM file) that signs every node's cluster certificate"`
	// Insecure lets the cluster port listen off loopback without mutual
	// TLS; the daemon warns about it at every start.
	Insecure Bool `toml:"insecure" help:"serve the cluster port off loopback without mutual TLS (true or false; anyone who reaches it controls the cluster)"`
	// DefaultPolicy, when set, is made the cluster's default_policy
	// setting once this node reaches a leader; unset leaves the setting
	// as the cluster has it (PUT /api/cluster/settings changes it live).
	DefaultPolicy string `toml:"default_policy" help:"policy (and so mode) of queues declared with neither, cluster-wide, e.g. replica_buffered:2; empty: durable on a majority"`
	// FailoverTimeout is how long a queue's owner may stay unreachable
	// from the leader before its queues fail over; default 3s.
	FailoverTimeout Duration `toml:"failover_timeout" help:"how long a queue's owner may stay unreachable before its queues fail over (200ms to 10m; default 3s)"`
	// FollowerHold is how long an owner's retention keeps records for a
	// follower it has not heard from; default 1h.
	FollowerHold Duration `toml:"follower_hold" help:"how long an owner keeps records for a follower that is down before its copy must be rebuilt from the owner's oldest record (1m to 30d; default 1h)"`
}

// Enabled reports whether the node is a cluster member.
func (c ClusterConfig) Enabled() bool { return c.Listen != "" }

// Bool is a config boolean that flags set as "true" or "false".
type Bool bool

// UnmarshalText reads true or false.
func (b *Bool) UnmarshalText(p []byte) error {
	switch strings.ToLower(string(p)) {
	case "true", "yes", "on", "1":
		*b = true
	case "false", "no", "off", "0", "":
		*b = false
	default:
		return fmt.Errorf("%q is not true or false", p)
	}
	return nil
}

func (b Bool) String() string { return fmt.Sprint(bool(b)) }

// IsLoopback reports whether a listen address serves loopback only: a
// loopback IP or localhost. An empty host listens on every interface.
func IsLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// peers parses "id@host:port" entries.
func (c ClusterConfig) peers() ([]federation.Peer, error) {
	var out []federation.Peer
	for _, p := range c.Peers {
		id, addr, ok := strings.Cut(p, "@")
		if !ok || id == "" {
			return nil, fmt.Errorf("peer %q: want id@host:port", p)
		}
		if !validHostPort(addr) {
			return nil, fmt.Errorf("peer %q: %q is not a host:port address (port 0 to 65535)", p, addr)
		}
		out = append(out, federation.Peer{ID: id, Addr: addr})
	}
	return out, nil
}

// clusterProblems checks [cluster] when it is on.
func (c Config) clusterProblems() []Problem {
	cl := c.Cluster
	if !cl.Enabled() {
		return nil
	}
	var problems []Problem
	bad := func(key, format string, args ...any) {
		problems = append(problems, Problem{Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	if !validHostPort(cl.Listen) {
		bad("cluster.listen", "%q is not a host:port address (port 0 to 65535)", cl.Listen)
	}
	if cl.Advertise != "" {
		if _, port, _ := net.SplitHostPort(cl.Advertise); !validHostPort(cl.Advertise) || port == "0" {
			bad("cluster.advertise", "%q is not a host:port address with a fixed port", cl.Advertise)
		}
	}
	if _, err := cl.peers(); err != nil {
		bad("cluster.peers", "%v", err)
	}
	if cl.DefaultPolicy != "" {
		if _, _, err := control.ParsePolicy(cl.DefaultPolicy); err != nil {
			bad("cluster.default_policy", "%v", err)
		}
	}
	if ft := time.Duration(cl.FailoverTimeout); ft != 0 && (ft < 200*time.Millisecond || ft > 10*time.Minute) {
		bad("cluster.failover_timeout", "%v: want 200ms to 10m", ft)
	}
	if fh := time.Duration(cl.FollowerHold); fh != 0 && (fh < time.Minute || fh > 30*24*time.Hour) {
		bad("cluster.follower_hold", "%v: want 1m to 30d", fh)
	}
	if cl.Bootstrap && cl.NonVoter {
		bad("cluster.bootstrap", "a non-voter cannot bootstrap the cluster")
	}
	tlsSet := 0
	for _, v := range []string{cl.TLSCert, cl.TLSKey, cl.TLSCA} {
		if v != "" {
			tlsSet++
		}
	}
	if tlsSet == 0 && !IsLoopback(cl.Listen) && !bool(cl.Insecure) {
		bad("cluster.listen", "%s is off loopback: the cluster port needs mutual TLS there (tls_cert, tls_key and tls_ca; "+
			"`fibril cluster certs` makes them), or insecure = true", cl.Listen)
	}
	if tlsSet != 0 && tlsSet != 3 {
		bad("cluster.tls_cert", "tls_cert, tls_key and tls_ca go together: set all three or none")
	}
	return problems
}

// clusterTLS builds the cluster port's mutual TLS from [cluster] for node
// id. The certificate must name the node (its common name is the id peers
// check it against) and be signed by tls_ca, so a misnamed or foreign
// certificate stops the start here, not later as a cluster that never
// forms.
func clusterTLS(cl ClusterConfig, id string) (server, client *tls.Config, err error) {
	if cl.TLSCert == "" {
		return nil, nil, nil
	}
	cert, err := tls.LoadX509KeyPair(cl.TLSCert, cl.TLSKey)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster.tls_cert: %w", err)
	}
	pem, err := os.ReadFile(cl.TLSCA)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster.tls_ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, nil, fmt.Errorf("cluster.tls_ca: no certificate in %s", cl.TLSCA)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, nil, fmt.Errorf("cluster.tls_cert: %w", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, nil, fmt.Errorf("cluster.tls_cert %s is not a valid certificate of the CA in cluster.tls_ca: %w", cl.TLSCert, err)
	}
	if id != "" && leaf.Subject.CommonName != id {
		return nil, nil, fmt.Errorf("cluster.tls_cert %s is for node %q (its common name), not this node, %q: peers would refuse it (`fibril cluster certs` makes one per node)",
			cl.TLSCert, leaf.Subject.CommonName, id)
	}
	server, client = federation.MutualTLS(cert, pool)
	return server, client, nil
}

// openCluster opens the node's control plane and its store of copies
// under the data directory: cluster/ (raft) and replicas/.
func openCluster(cfg Config, clientAddr string, group *wal.SyncGroup, log *slog.Logger) (*federation.Cluster, error) {
	cl := cfg.Cluster
	peers, err := cl.peers()
	if err != nil {
		return nil, err
	}
	id := cl.NodeID
	if id == "" {
		if id, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("cluster.node_id is empty and the host name is unknown: %w", err)
		}
	}
	srvTLS, cliTLS, err := clusterTLS(cl, id)
	if err != nil {
		return nil, err
	}
	c, err := federation.OpenCluster(federation.ClusterOptions{
		Node: federation.Options{ID: id, Dir: filepath.Join(cfg.Storage.DataDir, "cluster"), Listen: cl.Listen,
			Advertise: cl.Advertise, ClientAddr: clientAddr, NonVoter: bool(cl.NonVoter), Peers: peers,
			Bootstrap: bool(cl.Bootstrap), ServerTLS: srvTLS, ClientTLS: cliTLS, ElectionTimeout: time.Second,
			Logger: log},
		ReplicaDir:         filepath.Join(cfg.Storage.DataDir, "replicas"),
		ReplicaSegmentSize: int64(cfg.Storage.SegmentSize),
		ReplicaSyncGroup:   group,
		Forward:            forwardOptions(cfg, cliTLS),
		ForwardNamed:       cfg.Server.TLSCert != "" && cliTLS != nil, // the client listeners' certificates are the cluster CA's
		FailoverTimeout:    time.Duration(cl.FailoverTimeout),
		FollowerHold:       time.Duration(cl.FollowerHold),
	})
	if err != nil {
		return nil, err
	}
	log.Info("listening", "proto", "cluster", "addr", c.Node().ClusterAddr(), "node", id,
		"voter", !bool(cl.NonVoter), "tls", srvTLS != nil)
	if srvTLS == nil && !IsLoopback(cl.Listen) {
		log.Warn("INSECURE: the cluster port serves off loopback without mutual TLS ([cluster] insecure = true): "+
			"anyone who reaches it can join the cluster, read its data and delete its queues", "addr", cl.Listen)
	}
	if cl.DefaultPolicy != "" {
		c.EnsureSettings(map[string]string{"default_policy": cl.DefaultPolicy})
	}
	return c, nil
}

// forwardOptions are the client options a node forwards publishes with:
// the first [server] token, and TLS when [server] serves it (trusting the
// cluster CA when [cluster] has one, else the system's roots).
func forwardOptions(cfg Config, clusterClientTLS *tls.Config) client.Options {
	o := client.Options{ClientName: "fibrild-forward"}
	if len(cfg.Server.Tokens) > 0 {
		o.Token = cfg.Server.Tokens[0]
	}
	if cfg.Server.TLSCert != "" {
		o.TLS = &tls.Config{MinVersion: tls.VersionTLS12, CipherSuites: federation.AEADSuites}
		if clusterClientTLS != nil {
			o.TLS = clusterClientTLS.Clone()
			o.TLS.Certificates = nil
		}
	}
	return o
}

// closeCluster closes a node's cluster membership, if it has one; after
// the broker.
func closeCluster(c *federation.Cluster) error {
	if c == nil {
		return nil
	}
	if err := c.Close(); err != nil {
		return fmt.Errorf("close cluster node: %w", err)
	}
	return nil
}

var (
	_ server.Cluster = (*federation.Cluster)(nil)
	// A cluster node answers the queue management requests of protocol
	// version 5 (the server finds this with a type assertion).
	_ server.ClusterQueues = (*federation.Cluster)(nil)
)
