package federation

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/hashicorp/yamux"

	"github.com/fibril-edge/fibril/internal/preauth"
)

// The cluster port carries several protocols. A connection's first byte,
// sent by the dialer after TLS (when configured), says which.
const (
	protoRaft    byte = 'R' // hashicorp/raft's network transport
	protoControl byte = 'C' // one control request (forwarded command, join)
	protoReplica byte = 'P' // one replication stream, owner to follower (before links)
	protoLink    byte = 'L' // every replication stream from one node to another (link.go)
)

// handshakeTimeout bounds the TLS handshake and the protocol byte.
const handshakeTimeout = 10 * time.Second

// Connections that have not completed their handshake (TLS, when
// configured, and the protocol byte) are bounded per source and in total,
// as on the client port (internal/preauth): the oldest of the busiest
// source makes room for a newcomer, and past half of the total limit the
// handshake timeout shortens to pressureHandshakeTimeout. A peer node
// completes its handshake within a few round trips, so a flood costs the
// flooding addresses their own sockets while the cluster's own
// connections get in.
const (
	maxHandshaking           = 256
	maxHandshakingPerSource  = 64
	pressureHandshakeTimeout = time.Second
)

// mux accepts connections on the cluster port and hands each to the
// protocol its first byte names. The raft side is a raft.StreamLayer.
type mux struct {
	ln      net.Listener
	addr    net.Addr    // advertised: what peers dial
	tls     *tls.Config // server side; nil: plain TCP
	dialTLS *tls.Config // client side; nil: plain TCP
	// nodeAt names the node the cluster knows at a cluster address ("" for
	// none): a peer dialled there must present that node's certificate.
	nodeAt func(addr string) string
	// raftPeer reports whether raft RPCs from the node a peer's
	// certificate names are relayed (Node.raftPeerKnown).
	raftPeer func(id string) bool
	raftc    chan net.Conn
	control  func(net.Conn)
	replica  func(net.Conn) // nil: streams refused
	pending  *preauth.Set   // connections not past their handshake
	log      *slog.Logger
	done     chan struct{}
	once     sync.Once
	wg       sync.WaitGroup

	// raft's transport does not close the connections it accepted when it
	// shuts down (their handlers would read until the peer hangs up), so
	// the mux keeps them and close ends them; the links peers dialled too.
	rmu     sync.Mutex
	rconns  map[*raftConn]struct{}
	links   map[*yamux.Session]struct{}
	rclosed bool
}

func newMux(ln net.Listener, advertise net.Addr, serverTLS, clientTLS *tls.Config, nodeAt func(string) string, raftPeer func(string) bool, control, replica func(net.Conn), log *slog.Logger) *mux {
	m := &mux{ln: ln, addr: advertise, log: log, tls: serverTLS, dialTLS: clientTLS, nodeAt: nodeAt, raftPeer: raftPeer, raftc: make(chan net.Conn),
		control: control, replica: replica, done: make(chan struct{}), rconns: map[*raftConn]struct{}{},
		links: map[*yamux.Session]struct{}{},
		pending: preauth.New(preauth.Options{Max: maxHandshaking, PerSource: maxHandshakingPerSource,
			Timeout: handshakeTimeout, PressureTimeout: pressureHandshakeTimeout})}
	m.wg.Add(1)
	go m.serve()
	return m
}

func (m *mux) serve() {
	defer m.wg.Done()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			return
		}
		// The deadline is set before the handshake starts, so that a
		// shortening under pressure is never undone.
		a := m.pending.Add(preauth.SourceOf(c.RemoteAddr()), func(d time.Time) { c.SetDeadline(d) },
			func() { c.Close() }, time.Now())
		c.SetDeadline(a.Deadline)
		if a.Evict != nil {
			a.Evict.Evict()
		}
		if a.Warn {
			m.log.Warn("too many cluster connections in their handshake; closing the oldest of the busiest source",
				"limit", maxHandshaking, "per_source", maxHandshakingPerSource, "source", a.Evict.Source().String(),
				"evicted_total", m.pending.Evicted())
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.route(c, a.Entry)
		}()
	}
}

// route completes the handshake (TLS, then the protocol byte) and hands
// the connection on.
func (m *mux) route(c net.Conn, pending *preauth.Entry) {
	defer m.pending.Done(pending)
	if m.tls != nil {
		c = tls.Server(c, m.tls)
	}
	var b [1]byte
	if _, err := c.Read(b[:]); err != nil {
		c.Close()
		return
	}
	m.pending.Done(pending)
	c.SetDeadline(time.Time{})
	switch b[0] {
	case protoRaft:
		if id, ok := PeerNodeID(c); ok {
			c = checkRaftPeer(c, id, m.raftPeer, &m.wg, m.log)
		}
		rc, ok := m.trackRaft(c)
		if !ok {
			return
		}
		select {
		case m.raftc <- rc:
		case <-m.done:
			rc.Close()
		}
	case protoControl:
		m.control(c)
	case protoReplica:
		if m.replica == nil {
			c.Close()
			return
		}
		m.replica(c)
	case protoLink:
		m.serveLink(c) // a node that follows nothing still answers the link's pings
	default:
		c.Close()
	}
}

// dial connects to a peer's cluster port for proto.
func (m *mux) dial(addr string, proto byte, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if m.dialTLS != nil {
		tc := tls.Client(c, m.dialTLS)
		tc.SetDeadline(time.Now().Add(handshakeTimeout))
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, fmt.Errorf("cluster TLS handshake with %s: %w", addr, err)
		}
		tc.SetDeadline(time.Time{})
		if want := m.nodeAt(addr); want != "" {
			if got, _ := PeerNodeID(tc); got != want {
				c.Close()
				return nil, fmt.Errorf("%w: the cluster peer at %s presents a certificate for node %q, not %q",
					ErrWrongPeer, addr, got, want)
			}
		}
		c = tc
	}
	if _, err := c.Write([]byte{proto}); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// close stops accepting, ends the raft connections it accepted and waits
// for routing goroutines (control handlers return when their connection
// ends).
func (m *mux) close() {
	m.once.Do(func() {
		close(m.done)
		m.ln.Close()
	})
	m.rmu.Lock()
	conns, links := m.rconns, m.links
	m.rconns, m.links, m.rclosed = map[*raftConn]struct{}{}, map[*yamux.Session]struct{}{}, true
	m.rmu.Unlock()
	for c := range conns {
		c.Close()
	}
	for sess := range links {
		sess.Close()
	}
	m.wg.Wait()
}

// raftConn is an accepted raft connection the mux keeps until it closes.
type raftConn struct {
	net.Conn
	m    *mux
	once sync.Once
}

// trackRaft keeps c until it closes; false (c closed) once the mux has
// closed.
func (m *mux) trackRaft(c net.Conn) (*raftConn, bool) {
	rc := &raftConn{Conn: c, m: m}
	m.rmu.Lock()
	defer m.rmu.Unlock()
	if m.rclosed {
		c.Close()
		return nil, false
	}
	m.rconns[rc] = struct{}{}
	return rc, true
}

func (c *raftConn) Close() error {
	c.once.Do(func() {
		c.m.rmu.Lock()
		delete(c.m.rconns, c)
		c.m.rmu.Unlock()
	})
	return c.Conn.Close()
}

// raftLayer is the mux's raft side.
type raftLayer struct{ m *mux }

var _ raft.StreamLayer = raftLayer{}

func (l raftLayer) Accept() (net.Conn, error) {
	select {
	case c := <-l.m.raftc:
		return c, nil
	case <-l.m.done:
		return nil, errors.New("cluster listener closed")
	}
}

func (l raftLayer) Close() error   { l.m.once.Do(func() { close(l.m.done); l.m.ln.Close() }); return nil }
func (l raftLayer) Addr() net.Addr { return l.m.addr }

func (l raftLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return l.m.dial(string(addr), protoRaft, timeout)
}
