package federation

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/federation/control"
	"github.com/fibril-edge/fibril/internal/await"
	"github.com/fibril-edge/fibril/internal/leakcheck"
	"github.com/fibril-edge/fibril/internal/testcert"
)

const testElection = 200 * time.Millisecond

// testFailover is the tests' failover timeout: several elections, so a
// leader change alone does not fail a queue over.
const testFailover = 5 * testElection

type cluster struct {
	t     testing.TB
	tweak func(*Options)
	ids   []string
	addrs map[string]string
	dirs  map[string]string
	nodes map[string]*Node
}

// startCluster opens n voters on loopback, all bootstrapping with the
// same peer list, and waits until every node sees every member.
func startCluster(t testing.TB, n int, tweak ...func(*Options)) *cluster {
	t.Helper()
	c := &cluster{t: t, tweak: func(*Options) {}, addrs: map[string]string{}, dirs: map[string]string{}, nodes: map[string]*Node{}}
	lns := map[string]net.Listener{}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("n%d", i)
		ln := listenLoopback(t)
		c.ids = append(c.ids, id)
		c.addrs[id] = ln.Addr().String()
		c.dirs[id] = t.TempDir()
		lns[id] = ln
	}
	if len(tweak) > 0 {
		c.tweak = tweak[0]
	}
	for _, id := range c.ids {
		c.open(id, lns[id])
	}
	t.Cleanup(func() {
		for _, nd := range c.nodes {
			nd.Close()
		}
	})
	c.waitMembers(n)
	return c
}

func (c *cluster) open(id string, ln net.Listener) {
	c.t.Helper()
	var peers []Peer
	for _, other := range c.ids {
		if other != id {
			peers = append(peers, Peer{ID: other, Addr: c.addrs[other]})
		}
	}
	o := Options{ID: id, Dir: c.dirs[id], Listen: c.addrs[id], Listener: ln, ClientAddr: "127.0.0.1:1" + id[1:],
		Peers: peers, Bootstrap: true, ElectionTimeout: testElection,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	c.tweak(&o)
	nd, err := Open(o)
	if err != nil {
		c.t.Fatalf("open %s: %v", id, err)
	}
	c.nodes[id] = nd
}

func (c *cluster) waitMembers(n int) {
	c.t.Helper()
	for id, nd := range c.nodes {
		await.Within(c.t, 30*time.Second, id+" to see "+fmt.Sprint(n)+" members", func() bool {
			return len(nd.State().Members) == n
		})
	}
}

func (c *cluster) leader() string {
	c.t.Helper()
	var id string
	await.Within(c.t, 30*time.Second, "a leader", func() bool {
		for nid, nd := range c.nodes {
			if nd.IsLeader() {
				id = nid
				return true
			}
		}
		return false
	})
	return id
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A follower hears of each commit at once (pushCommits), not at raft's
// next idle AppendEntries: with raft's commit timer an hour long, the
// members still join, a declare through a follower (answered once that
// follower applied it) completes, and a deletion on the leader reaches
// every follower, each within the test's deadline.
func TestFollowersApplyWithoutRaftsCommitTimer(t *testing.T) {
	c := startCluster(t, 3, func(o *Options) { o.CommitTimeout = time.Hour })
	lead := c.leader()
	ctx := ctxT(t)
	for _, id := range c.ids {
		if id == lead {
			continue
		}
		name := "via-" + id
		if _, created, err := c.nodes[id].Declare(ctx, appliance.QueueConfig{Name: name, Durability: appliance.Durable}, ""); err != nil || !created {
			t.Fatalf("declare through follower %s: created %v, %v", id, created, err)
		}
		if _, ok := c.nodes[id].State().Queues[name]; !ok {
			t.Fatalf("follower %s answered the declare before applying it", id)
		}
	}
	var gone string
	for _, id := range c.ids {
		if id != lead {
			gone = "via-" + id
			break
		}
	}
	if err := c.nodes[lead].DeleteQueue(ctx, gone); err != nil {
		t.Fatal(err)
	}
	for _, id := range c.ids {
		await.Within(t, 30*time.Second, id+" to apply the deletion", func() bool {
			_, ok := c.nodes[id].State().Queues[gone]
			return !ok
		})
	}
}

// Issue test 4: declarations and assignments survive a leader kill and
// re-election, a re-declare with the other mode is rejected on every node,
// and a declare through a follower is forwarded to the leader.
func TestLeaderKillKeepsDeclarations(t *testing.T) {
	c := startCluster(t, 3)
	lead := c.leader()
	var follower string
	for _, id := range c.ids {
		if id != lead {
			follower = id
			break
		}
	}
	ctx := ctxT(t)
	q, created, err := c.nodes[follower].Declare(ctx, appliance.QueueConfig{Name: "orders", Durability: appliance.Durable, Partitions: 3}, "")
	if err != nil || !created || q.Policy.Kind != control.MajorityDurable {
		t.Fatalf("declare through follower %s: %+v %v %v", follower, q, created, err)
	}
	if _, _, err := c.nodes[lead].Declare(ctx, appliance.QueueConfig{Name: "readings"}, "replica_accepted:2"); err != nil {
		t.Fatal(err)
	}
	before := c.nodes[lead].State()
	if as := before.Assignments["orders"]; len(as) != 3 {
		t.Fatalf("orders assignments %+v", as)
	}

	// Kill the leader; the others elect a new one and keep the state.
	c.nodes[lead].Close()
	delete(c.nodes, lead)
	newLead := c.leader()
	if newLead == lead {
		t.Fatalf("closed node %s still leads", lead)
	}
	// A new leader applies what was committed before it answers.
	await.Within(t, 30*time.Second, newLead+" to apply the committed declarations", func() bool {
		_, ok := c.nodes[newLead].State().Queues["readings"]
		return ok
	})
	after := c.nodes[newLead].State()
	for i, a := range before.Assignments["orders"] {
		b := after.Assignments["orders"][i]
		if a.Owner != b.Owner || a.Epoch != b.Epoch || fmt.Sprint(a.Followers) != fmt.Sprint(b.Followers) {
			t.Fatalf("partition %d assignment changed over the election: %+v → %+v", i, a, b)
		}
	}
	if r := after.Queues["readings"]; r.Policy != (control.Policy{Kind: control.ReplicaDurable, N: 2}) || len(r.Warnings) == 0 {
		t.Fatalf("readings after election: %+v", r)
	}

	// Restart the old leader from its directory: it catches up.
	ln, err := net.Listen("tcp", c.addrs[lead])
	if err != nil {
		t.Fatal(err)
	}
	c.open(lead, ln)
	await.Within(t, 30*time.Second, lead+" to catch up", func() bool {
		_, ok := c.nodes[lead].State().Queues["readings"]
		return ok
	})
	for _, id := range c.ids {
		_, _, err := c.nodes[id].Declare(ctx, appliance.QueueConfig{Name: "orders", Durability: appliance.Buffered}, "")
		if !errors.Is(err, appliance.ErrModeConflict) {
			t.Fatalf("mode switch through %s: %v, want ErrModeConflict", id, err)
		}
	}
	if _, _, err := c.nodes[follower].Declare(ctx, appliance.QueueConfig{Name: "x"}, "replica_durable:5"); !errors.Is(err, control.ErrNotEnoughMembers) {
		t.Fatalf("5 copies on 3 nodes: %v", err)
	}
	if _, _, err := c.nodes[follower].Declare(ctx, appliance.QueueConfig{Name: "x"}, "quorum"); !errors.Is(err, control.ErrInvalidPolicy) {
		t.Fatalf("bad policy: %v", err)
	}
}

// A node that is not a voter joins through any member and is in the
// member list, but not in raft's votes.
func TestNonVoterJoins(t *testing.T) {
	c := startCluster(t, 3)
	nv, err := Open(Options{ID: "edge", Dir: t.TempDir(), Listen: "127.0.0.1:0", NonVoter: true,
		Peers: []Peer{{ID: "n2", Addr: c.addrs["n2"]}}, ElectionTimeout: testElection,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer nv.Close()
	await.Within(t, 30*time.Second, "edge in the member list on every node", func() bool {
		for _, nd := range c.nodes {
			if m, ok := nd.State().Members["edge"]; !ok || m.Voter {
				return false
			}
		}
		_, ok := nv.State().Members["n1"]
		return ok
	})
	f := c.nodes[c.leader()].raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == "edge" && s.Suffrage.String() != "Nonvoter" {
			t.Fatalf("edge in raft as %v", s.Suffrage)
		}
	}
}

// A raft future whose entry raft committed and had not applied when it
// shut down is never answered (hashicorp/raft#498): the goroutine
// Node.awaitRaft leaves waiting on it ends only with the process.
func TestMain(m *testing.M) { leakcheck.Main(m, "federation.(*Node).awaitRaft.func1") }

// clusterCerts makes a cluster CA and returns the TLS of any node id it
// signs a certificate for, and the CA pool.
func clusterCerts(t testing.TB) (nodeTLS func(id string) (server, client *tls.Config), pool *x509.CertPool) {
	t.Helper()
	caCert, caKey, err := NewCA("test cluster")
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caCert) {
		t.Fatal("CA certificate does not parse")
	}
	return func(id string) (*tls.Config, *tls.Config) {
		certPEM, keyPEM, err := NewNodeCert(caCert, caKey, id, []string{"127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return MutualTLS(cert, pool)
	}, pool
}

// With mutual TLS on the cluster port, each node's certificate naming it,
// the cluster forms and forwards as before; a node without a certificate
// the cluster CA signed cannot join, and neither can a node whose
// certificate names another node than the one it claims to be.
func TestClusterPortTLS(t *testing.T) {
	nodeTLS, pool := clusterCerts(t)
	c := startCluster(t, 3, func(o *Options) { o.ServerTLS, o.ClientTLS = nodeTLS(o.ID) })
	lead := c.leader()
	for _, id := range c.ids {
		if id != lead {
			if _, _, err := c.nodes[id].Declare(ctxT(t), appliance.QueueConfig{Name: "over-tls"}, ""); err != nil {
				t.Fatalf("declare through %s over TLS: %v", id, err)
			}
			break
		}
	}
	// TLS 1.2 with CBC suites only: refused, whatever the certificate.
	_, n1cli := nodeTLS("n1")
	cbc := n1cli.Clone()
	cbc.MaxVersion, cbc.CipherSuites = tls.VersionTLS12, []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA}
	if conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", c.addrs["n1"], cbc); err == nil {
		conn.Close()
		t.Fatal("the cluster port completed a TLS 1.2 handshake with CBC suites only")
	}
	other, _ := testcert.SelfSigned(t) // a certificate the cluster did not sign
	_, foreign := MutualTLS(other, pool)
	srv, impostor := nodeTLS("n5") // signed, but for another node
	for name, cli := range map[string]*tls.Config{"a foreign CA": foreign, "a certificate for n5": impostor} {
		intruder, err := Open(Options{ID: "intruder", Dir: t.TempDir(), Listen: "127.0.0.1:0", ServerTLS: srv, ClientTLS: cli,
			Peers: []Peer{{ID: "n1", Addr: c.addrs["n1"]}}, ElectionTimeout: testElection,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = intruder.JoinVia(ctx, c.addrs["n1"])
		cancel()
		intruder.Close()
		if err == nil {
			t.Fatalf("a node with %s joined as intruder", name)
		}
		if cli == impostor && !strings.Contains(err.Error(), `names node "n5"`) {
			t.Fatalf("joining as intruder with n5's certificate: %v", err)
		}
		if _, ok := c.nodes[lead].State().Members["intruder"]; ok {
			t.Fatalf("with %s: intruder in the member list", name)
		}
	}
}

// A node started with no peers and no bootstrap joins when asked to, as
// `fibril cluster join` asks it, and becomes a voter.
func TestJoinViaPeer(t *testing.T) {
	c := startCluster(t, 3)
	n4, err := Open(Options{ID: "n4", Dir: t.TempDir(), Listen: "127.0.0.1:0", ElectionTimeout: testElection,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer n4.Close()
	if err := n4.JoinVia(ctxT(t), c.addrs["n3"]); err != nil {
		t.Fatal(err)
	}
	await.Within(t, 30*time.Second, "n4 to learn the member list", func() bool {
		return len(n4.State().Members) == 4
	})
	f := c.nodes[c.leader()].raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	var voter bool
	for _, s := range f.Configuration().Servers {
		voter = voter || (s.ID == "n4" && s.Suffrage.String() == "Voter")
	}
	if !voter {
		t.Fatalf("n4 not a voter: %+v", f.Configuration().Servers)
	}
}

// A request is passed on at most maxHops times: one that has made them,
// received by a follower, is answered with ErrNoLeader and goes no
// further, so two followers that take each other for the leader cannot
// pass one request back and forth. The same request sent first-hand is
// forwarded and applied.
func TestForwardedRequestsHopsAreBounded(t *testing.T) {
	c := startCluster(t, 3)
	lead := c.leader()
	var follower, third string
	for _, id := range c.ids {
		switch {
		case id == lead:
		case follower == "":
			follower = id
		default:
			third = id
		}
	}
	ctx := ctxT(t)
	from := c.nodes[third]
	cmd := func(v string) controlRequest {
		return controlRequest{Command: &control.Command{Op: control.OpSetSettings, Settings: map[string]string{"replicas": v}}}
	}
	passedOn := context.WithValue(ctx, servingKey{}, maxHops-1) // as the last node that may pass it on
	resp, err := from.request(passedOn, c.addrs[follower], cmd("2"))
	if err != nil {
		t.Fatal(err)
	}
	if r := decodeResult(resp); !errors.Is(r.Err, ErrNoLeader) {
		t.Fatalf("a forwarded request at follower %s: %+v, want ErrNoLeader", follower, r)
	}
	if got := c.nodes[lead].State().Settings["replicas"]; got != "" {
		t.Fatalf("the forwarded request was passed on and applied: replicas = %q", got)
	}
	resp, err = from.request(ctx, c.addrs[follower], cmd("2"))
	if err != nil {
		t.Fatal(err)
	}
	if r := decodeResult(resp); r.Err != nil {
		t.Fatalf("a first-hand request at follower %s: %v", follower, r.Err)
	}
	if got := c.nodes[lead].State().Settings["replicas"]; got != "2" {
		t.Fatalf("the first-hand request was not applied: replicas = %q", got)
	}
}

// A node dialling a cluster address checks that the peer answering is the
// node the cluster knows there: a certificate the cluster's CA signed for
// another node is refused, as a stand-in for a peer would present.
func TestDialChecksThePeersCertificate(t *testing.T) {
	nodeTLS, _ := clusterCerts(t)
	c := startCluster(t, 3, func(o *Options) { o.ServerTLS, o.ClientTLS = nodeTLS(o.ID) })
	srv, cli := nodeTLS("n9")
	// n9 believes n2 answers at n3's address: whoever answers there
	// presents n3's certificate, not n2's.
	n9, err := Open(Options{ID: "n9", Dir: t.TempDir(), Listen: "127.0.0.1:0", ServerTLS: srv, ClientTLS: cli,
		Peers: []Peer{{ID: "n2", Addr: c.addrs["n3"]}, {ID: "n1", Addr: c.addrs["n1"]}}, ElectionTimeout: testElection,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer n9.Close()
	if _, err := n9.mux.dial(c.addrs["n3"], protoControl, 5*time.Second); !errors.Is(err, ErrWrongPeer) {
		t.Fatalf("dial n2's address answered by n3: %v, want ErrWrongPeer", err)
	}
	conn, err := n9.mux.dial(c.addrs["n1"], protoControl, 5*time.Second)
	if err != nil {
		t.Fatalf("dial n1 where n1 answers: %v", err)
	}
	conn.Close()
}

// A node whose raft state was wiped sees no queue declared before it came
// back as fresh (one it saw created, whose log holds all the queue had),
// however many batches its catch-up from the leader takes; a queue
// declared once it is back is fresh to it.
func TestWipedNodeSeesNothingFreshFromBefore(t *testing.T) {
	c := startCluster(t, 3)
	lead := c.leader()
	var wiped string
	for _, id := range c.ids {
		if id != lead {
			wiped = id
			break
		}
	}
	ctx := ctxT(t)
	// More commands than one append batch of raft carries (64), so the
	// wiped node catches up in several.
	const queues = 200
	for i := range queues {
		if _, _, err := c.nodes[lead].Declare(ctx, appliance.QueueConfig{Name: fmt.Sprintf("q%03d", i)}, ""); err != nil {
			t.Fatal(err)
		}
	}
	before := c.nodes[lead].State()

	c.nodes[wiped].Close()
	delete(c.nodes, wiped)
	c.dirs[wiped] = t.TempDir()
	ln, err := net.Listen("tcp", c.addrs[wiped])
	if err != nil {
		t.Fatal(err)
	}
	c.open(wiped, ln)
	nd := c.nodes[wiped]
	await.Within(t, 30*time.Second, wiped+" to catch up", func() bool {
		return len(nd.State().Queues) == queues
	})
	for name, q := range before.Queues {
		if nd.Fresh(q.Incarnation) {
			t.Fatalf("queue %s, declared at %d before %s was wiped, is fresh to it", name, q.Incarnation, wiped)
		}
	}
	// What is committed before the leader has told it where its live
	// commands begin is not fresh to it either.
	await.Within(t, 30*time.Second, wiped+" to hear from the leader where its live commands begin", nd.liveKnown)
	after, _, err := c.nodes[lead].Declare(ctx, appliance.QueueConfig{Name: "later"}, "")
	if err != nil {
		t.Fatal(err)
	}
	await.Within(t, 30*time.Second, "the queue declared after "+wiped+" was back to be fresh to it", func() bool {
		return nd.Fresh(after.Incarnation)
	})
}

// BenchmarkDeclare declares queues one after another through the leader
// and through a follower, on raft's production timers (a 1 s election
// timeout): a follower answers once it applied the declaration itself.
func BenchmarkDeclare(b *testing.B) {
	c := startCluster(b, 3, func(o *Options) { o.ElectionTimeout = time.Second })
	lead := c.leader()
	follower := c.ids[0]
	if follower == lead {
		follower = c.ids[1]
	}
	for _, via := range []struct{ name, id string }{{"leader", lead}, {"follower", follower}} {
		b.Run(via.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				i++
				cfg := appliance.QueueConfig{Name: fmt.Sprintf("%s-%d", via.name, i), Durability: appliance.Durable}
				if _, _, err := c.nodes[via.id].Declare(context.Background(), cfg, ""); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A leader closed while it applies a burst of commands closes: neither
// a proposal nor the commit push waits on a raft future that raft, shut
// down with the entry committed and not applied, never answers.
func TestLeaderClosesDuringABurstOfCommands(t *testing.T) {
	c := startCluster(t, 3)
	lead := c.nodes[c.leader()]
	ctx := ctxT(t)
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			lead.Declare(ctx, appliance.QueueConfig{Name: fmt.Sprint("burst-", i), Durability: appliance.Durable}, "") // refused once closed
		})
	}
	await.Within(t, 30*time.Second, "the burst to start applying", func() bool { return lead.fsm.Applied() > 0 && len(lead.State().Queues) > 0 })
	closed := make(chan error, 1)
	go func() { closed <- lead.Close() }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("the leader did not close within 30 s")
	}
	wg.Wait()
}

// BenchmarkPing is one probe of the leader's failure detector, with
// mutual TLS on the cluster port: on the link kept for pings (what
// watchOwners sends), against a control request (what it sent before,
// a connection and a TLS handshake each).
func BenchmarkPing(b *testing.B) {
	nodeTLS, _ := clusterCerts(b)
	c := startCluster(b, 2, func(o *Options) { o.ServerTLS, o.ClientTLS = nodeTLS(o.ID) })
	from, to := c.nodes["n1"], c.addrs["n2"]
	ctx := context.Background()
	b.Run("link", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := from.ping(ctx, to); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("control", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if resp, err := from.request(ctx, to, controlRequest{Ping: true}); err != nil || resp.Code != "" {
				b.Fatal(err, resp.Error)
			}
		}
	})
}

// A node whose certificate the cluster CA signed, but which is no member
// (a node removed, or one never joined), cannot rewrite a member's entry
// with a raw add_member command: other nodes would forward that member's
// publishes, and the [server] token with them, to the address it names.
// Members change only through a Join, which names the certificate's node.
func TestControlRefusesMemberChangesFromAPeer(t *testing.T) {
	nodeTLS, _ := clusterCerts(t)
	c := startCluster(t, 3, func(o *Options) { o.ServerTLS, o.ClientTLS = nodeTLS(o.ID) })
	lead := c.leader()
	srv, cli := nodeTLS("x")
	x, err := Open(Options{ID: "x", Dir: t.TempDir(), Listen: "127.0.0.1:0", ServerTLS: srv, ClientTLS: cli,
		ElectionTimeout: testElection, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	orig := c.nodes[lead].State().Members["n2"]
	forged := orig
	forged.ClientAddr = "127.0.0.1:6666"
	for _, cmd := range []control.Command{
		{Op: control.OpAddMember, Member: &forged},
		{Op: control.OpRemoveMember, ID: "n2"},
		{Op: control.OpSeal, Seal: &control.SealReport{Queue: "q", Node: "n2"}},
	} {
		resp, err := x.request(ctx, c.addrs[lead], controlRequest{Command: &cmd})
		if err != nil {
			t.Fatal(err)
		}
		if r := decodeResult(resp); !errors.Is(r.Err, appliance.ErrInvalid) {
			t.Fatalf("%s from node x, no member: %v, want refused as invalid", cmd.Op, r.Err)
		}
	}
	if got := c.nodes[lead].State().Members["n2"]; got != orig {
		t.Fatalf("member n2 changed from %+v to %+v", orig, got)
	}
}

// A seal report, like an adoption, names its node, and the leader checks
// that name against the certificate of the node that sent it. A node that
// does not lead does not pass such a request on (the leader would see its
// certificate and refuse the report as another node's): it answers that
// it does not lead, and the node that sent it asks the leader itself.
func TestControlKeepsNodeBoundCommandsToTheirSender(t *testing.T) {
	nodeTLS, _ := clusterCerts(t)
	c := startCluster(t, 3, func(o *Options) { o.ServerTLS, o.ClientTLS = nodeTLS(o.ID) })
	lead := c.leader()
	var others []string
	for _, id := range c.ids {
		if id != lead {
			others = append(others, id)
		}
	}
	from, via := others[0], others[1]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	self := c.nodes[from].opts.ID
	for _, cmd := range []control.Command{
		{Op: control.OpSeal, Seal: &control.SealReport{Queue: "q", Node: self}},
		{Op: control.OpAdopt, Owner: self},
	} {
		resp, err := c.nodes[from].request(ctx, c.addrs[via], controlRequest{Command: &cmd})
		if err != nil {
			t.Fatal(err)
		}
		if r := decodeResult(resp); !errors.Is(r.Err, ErrNoLeader) {
			t.Fatalf("%s for %s sent through %s, which does not lead: %v, want ErrNoLeader (not passed on)",
				cmd.Op, self, c.nodes[via].opts.ID, r.Err)
		}
	}
}
