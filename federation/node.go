package federation

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/federation/control"
	"github.com/fibril-edge/fibril/federation/raftstore"
)

// Errors callers tell apart.
var (
	// ErrNoLeader: no leader is known yet (an election is under way or
	// too few voters are up); retry.
	ErrNoLeader = fmt.Errorf("cluster has no leader: %w", appliance.ErrUnavailable)
	// ErrClosed: the node is closed.
	ErrClosed = errors.New("cluster node closed")
	// ErrWrongPeer: a cluster address was answered by a node other than
	// the one the cluster knows there (its certificate names another).
	ErrWrongPeer = errors.New("cluster peer is not the node dialled")
)

// Peer is another voter named in the configuration.
type Peer struct {
	ID   string
	Addr string // cluster port, host:port
}

// Options configure a Node. ID, Dir and Listen are required.
type Options struct {
	// ID is this node's id, unique in the cluster.
	ID string
	// Dir holds the raft log (Pebble) and snapshots.
	Dir string
	// Listen is the cluster port's address; "127.0.0.1:0" picks a port.
	Listen string
	// Listener, when set, is used instead of listening on Listen (tests
	// open their listeners first to know every address up front).
	Listener net.Listener
	// Advertise is the address peers dial; default the listener's.
	Advertise string
	// ClientAddr is this node's client protocol address, published in the
	// member list so clients and peers can find it.
	ClientAddr string
	// NonVoter keeps the node out of raft's votes; it still hosts
	// replicas. Default false: a voter.
	NonVoter bool
	// Peers are the other voters. With Bootstrap, the cluster is formed
	// from this node and Peers (every voter may bootstrap with the same
	// list); without it, the node asks the peers to let it join.
	Peers     []Peer
	Bootstrap bool
	// ServerTLS and ClientTLS secure the cluster port when set (both or
	// neither).
	ServerTLS, ClientTLS *tls.Config
	// ElectionTimeout scales raft's heartbeat, election and lease
	// timeouts; default 1 s (raft's default). Tests use less.
	ElectionTimeout time.Duration
	// CommitTimeout is raft's: how long the leader lets a follower go
	// without an AppendEntries while nothing new is committed, which is
	// also when it retries one that failed; default ElectionTimeout/20.
	// The leader tells followers of each commit at once (pushCommits),
	// so no command waits for it. A test sets it long to show that.
	CommitTimeout time.Duration
	// Logger receives the node's log; default slog.Default().
	Logger *slog.Logger
	// Replica, when set, serves replication streams arriving on the
	// cluster port (each call owns its connection until the stream ends).
	Replica func(net.Conn)
}

// Node is one member of the cluster's control plane.
type Node struct {
	opts  Options
	log   *slog.Logger
	fsm   *control.FSM
	store *raftstore.Store
	mux   *mux
	links *links // outgoing replication links
	// probes are the leader's links for its failure detector's pings
	// alone: a ping queued behind a link's replication data (a catch-up
	// on a slow network) would miss its tick and fail a live owner over.
	probes *links
	raft   *raft.Raft
	trans  *raft.NetworkTransport

	ready   chan struct{} // closed once raft is set: control requests wait for it
	changed chan struct{} // closed and replaced on every applied command
	applied chan struct{} // wakes pushCommits (commitpush.go); one buffered
	mu      sync.Mutex    // guards changed
	stop    chan struct{}
	wg      sync.WaitGroup

	// replayed closes once the state machine has applied replayAt, the
	// last command of the raft log at open (see replay.go).
	replayed   chan struct{}
	replayAt   uint64
	replayOnce sync.Once

	// blank: raft had no state at open (a new node, or a wiped one).
	// liveFrom is where fresh commands begin, set before liveSet (see
	// Fresh): at open, or once the leader answered (learnLive).
	blank    bool
	liveFrom atomic.Uint64
	liveSet  atomic.Bool
}

// Open starts the node: its cluster listener, raft, and (unless it is
// already a member) its announcement to the leader.
func Open(o Options) (*Node, error) {
	if o.ID == "" || o.Dir == "" || (o.Listen == "" && o.Listener == nil) {
		return nil, errors.New("federation: ID, Dir and Listen are required")
	}
	if (o.ServerTLS == nil) != (o.ClientTLS == nil) {
		return nil, errors.New("federation: cluster TLS needs both a server and a client configuration")
	}
	if o.ElectionTimeout <= 0 {
		o.ElectionTimeout = time.Second
	}
	if o.CommitTimeout <= 0 {
		o.CommitTimeout = o.ElectionTimeout / 20
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	n := &Node{opts: o, log: o.Logger.With("node", o.ID), ready: make(chan struct{}), changed: make(chan struct{}),
		replayed: make(chan struct{}), stop: make(chan struct{}), applied: make(chan struct{}, 1)}
	n.fsm = control.NewFSM(n.notify)
	if err := os.MkdirAll(o.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("federation: %w", err)
	}
	store, err := raftstore.Open(filepath.Join(o.Dir, "raft"), raftstore.Options{})
	if err != nil {
		return nil, err
	}
	n.store = store
	if n.replayAt, err = replayTarget(store); err != nil {
		store.Close()
		return nil, err
	}
	n.liveFrom.Store(n.replayAt) // a blank node learns it from the leader (learnLive)
	ln := o.Listener
	if ln == nil {
		ln, err = net.Listen("tcp", o.Listen)
	}
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("federation: listen on the cluster port %s: %w", o.Listen, err)
	}
	var adv net.Addr = ln.Addr()
	if o.Advertise != "" {
		if adv, err = net.ResolveTCPAddr("tcp", o.Advertise); err != nil {
			ln.Close()
			store.Close()
			return nil, fmt.Errorf("federation: advertise address %q: %w", o.Advertise, err)
		}
	}
	n.mux = newMux(ln, adv, o.ServerTLS, o.ClientTLS, n.nodeAt, n.raftPeerKnown, n.serveControl, o.Replica, n.log)
	n.links, n.probes = newLinks(n.mux), newLinks(n.mux)
	if err := n.startRaft(); err != nil {
		n.mux.close()
		store.Close()
		return nil, err
	}
	close(n.ready)
	n.checkReplayed()
	n.wg.Add(2)
	go n.pushCommits()
	go func() {
		if n.blank {
			n.learnLive() // before the announcement: see learnLive
		}
		select {
		case <-n.stop:
			n.wg.Done()
		default:
			n.announce()
		}
	}()
	return n, nil
}

func (n *Node) startRaft() error {
	o := n.opts
	logw := slogWriter{n.log}
	cfg := raft.DefaultConfig()
	cfg.LocalID = raft.ServerID(o.ID)
	cfg.HeartbeatTimeout = o.ElectionTimeout
	cfg.ElectionTimeout = o.ElectionTimeout
	cfg.LeaderLeaseTimeout = o.ElectionTimeout / 2
	cfg.CommitTimeout = o.CommitTimeout
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: logw})
	snaps, err := raft.NewFileSnapshotStore(o.Dir, 2, logw)
	if err != nil {
		return fmt.Errorf("federation: snapshot store: %w", err)
	}
	n.trans = raft.NewNetworkTransport(raftLayer{n.mux}, 3, 10*time.Second, logw)
	existing, err := raft.HasExistingState(n.store, n.store, snaps)
	if err != nil {
		return fmt.Errorf("federation: read raft state: %w", err)
	}
	n.blank = !existing
	if o.Bootstrap && !existing {
		servers := []raft.Server{{ID: cfg.LocalID, Address: n.trans.LocalAddr()}}
		for _, p := range o.Peers {
			servers = append(servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)})
		}
		if err := raft.BootstrapCluster(cfg, n.store, n.store, snaps, n.trans, raft.Configuration{Servers: servers}); err != nil {
			return fmt.Errorf("federation: bootstrap: %w", err)
		}
	}
	r, err := raft.NewRaft(cfg, n.fsm, n.store, n.store, snaps, n.trans)
	if err != nil {
		return fmt.Errorf("federation: start raft: %w", err)
	}
	n.raft = r
	if !n.blank {
		// What raft restored from a snapshot was applied before this
		// process, like what its own log replays.
		n.liveFrom.Store(max(n.replayAt, n.fsm.Applied()))
		n.liveSet.Store(true)
	}
	return nil
}

// nodeAt is the node the cluster knows at a cluster address: a member
// there, else a peer this node was started with; "" for none.
func (n *Node) nodeAt(addr string) string {
	id := ""
	n.read(func(s *control.State) {
		for _, m := range s.Members {
			if m.ClusterAddr == addr {
				id = m.ID
			}
		}
	})
	for _, p := range n.opts.Peers {
		if id == "" && p.Addr == addr {
			id = p.ID
		}
	}
	return id
}

// Member is this node's entry in the member list.
func (n *Node) Member() control.Member {
	return control.Member{ID: n.opts.ID, ClusterAddr: string(n.trans.LocalAddr()),
		ClientAddr: n.opts.ClientAddr, Voter: !n.opts.NonVoter}
}

// DialReplica opens a replication stream to a peer's cluster port, on
// the link to that peer (link.go).
func (n *Node) DialReplica(ctx context.Context, addr string) (net.Conn, error) {
	return n.links.open(ctx, addr)
}

// ClusterAddr is the address peers dial.
func (n *Node) ClusterAddr() string { return string(n.trans.LocalAddr()) }

// announce makes sure this node is in the member list (and, for a
// non-voter or a late joiner, in raft's configuration), retrying with
// backoff until it is or the node closes.
func (n *Node) announce() {
	defer n.wg.Done()
	backoff := n.opts.ElectionTimeout / 4
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 4*n.opts.ElectionTimeout)
		err := n.join(ctx, n.Member())
		cancel()
		if err == nil {
			return
		}
		n.log.Debug("announcing to the cluster", "err", err)
		select {
		case <-n.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// State is a copy of this node's view of the replicated state. A
// follower's view may lag the leader's by the commands in flight.
func (n *Node) State() *control.State { return n.fsm.State() }

// shared is this node's view of the replicated state, shared with every
// other caller until the next applied command (control.FSM.Shared): for
// the loops that read it all after every command. It must not be changed.
func (n *Node) shared() *control.State { return n.fsm.Shared() }

// read calls f with this node's view of the state without copying it (see
// control.FSM.Read).
func (n *Node) read(f func(*control.State)) { n.fsm.Read(f) }

// raftPeerKnown reports whether raft RPCs from node id, as its certificate
// names it, are let through: id is in this node's latest raft
// configuration (committed or not: a node restarting learns the members
// added since its snapshot from the very RPCs it must let in), or this
// node is in none yet (it is joining, and learns the members from its
// leader). Until raft runs, nothing is.
func (n *Node) raftPeerKnown(id string) bool {
	select {
	case <-n.ready:
	default:
		return false
	}
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	servers := f.Configuration().Servers
	me := slices.ContainsFunc(servers, func(s raft.Server) bool { return string(s.ID) == n.opts.ID })
	return !me || slices.ContainsFunc(servers, func(s raft.Server) bool { return string(s.ID) == id })
}

// Leader is the current leader's id and cluster address, empty when none
// is known.
func (n *Node) Leader() (id, addr string) {
	a, i := n.raft.LeaderWithID()
	return string(i), string(a)
}

// IsLeader reports whether this node leads.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Changed returns a channel closed at the next applied command, or when
// a blank node learned where its live commands begin (learnLive).
func (n *Node) Changed() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.changed
}

func (n *Node) notify() {
	n.checkReplayed()
	n.wake()
	n.appliedCommand()
}

// wake closes the channel Changed returned: whoever waits on it looks
// at the state again.
func (n *Node) wake() {
	n.mu.Lock()
	close(n.changed)
	n.changed = make(chan struct{})
	n.mu.Unlock()
}

// Close leaves raft running state behind on disk and stops the node.
func (n *Node) Close() error {
	select {
	case <-n.stop:
		return nil
	default:
	}
	close(n.stop)
	err := n.raft.Shutdown().Error()
	n.trans.Close()
	n.links.close()
	n.probes.close()
	n.mux.close()
	n.wg.Wait()
	return errors.Join(err, n.store.Close())
}

// slogWriter turns raft's log lines into slog records.
type slogWriter struct{ log *slog.Logger }

var _ io.Writer = slogWriter{}

func (w slogWriter) Write(p []byte) (int, error) {
	w.log.Warn(string(trimNewline(p)), "component", "raft")
	return len(p), nil
}

func trimNewline(p []byte) []byte {
	for len(p) > 0 && (p[len(p)-1] == '\n' || p[len(p)-1] == '\r') {
		p = p[:len(p)-1]
	}
	return p
}
