package federation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// The replication streams from one node to another share one connection,
// a link: yamux multiplexes them, each stream a net.Conn with its own flow
// control window, so a copy that stops reading holds up only its own
// stream. Under yamux each link's connection gathers what its streams
// write (gatherConn): while one write() is in the kernel, the frames of
// every other partition queue behind it and leave together in the next,
// so a thousand partitions replicating to the same follower cost a few
// writes, not a thousand.
//
// The owner dials the link (protoLink) on the first stream it opens to a
// follower and opens every later stream on it; a link that failed is
// dialled again by the next stream. The follower accepts the link's
// streams and serves each as it served a connection of its own; the
// stream names the node the link's certificate named (PeerNodeID).

// linkConfig is yamux's configuration for both ends of a link.
func linkConfig() *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard // every stream's error reaches its own end
	// A stream open waits for the follower's accept, which hands it to a
	// goroutine at once; a link where that takes this long is dead.
	cfg.StreamOpenTimeout = 30 * time.Second
	// A stream closed here waits this long for the other end's close
	// before it is reset.
	cfg.StreamCloseTimeout = 30 * time.Second
	cfg.KeepAliveInterval = 10 * time.Second
	cfg.AcceptBacklog = 1024
	return cfg
}

// links is a node's outgoing links, one per peer address.
type links struct {
	m      *mux
	mu     sync.Mutex
	byAddr map[string]*link
	closed bool
}

// link is one outgoing link; ready is closed once sess or err is set.
type link struct {
	ready chan struct{}
	sess  *yamux.Session
	err   error
}

func newLinks(m *mux) *links { return &links{m: m, byAddr: map[string]*link{}} }

// ErrLinksClosed is returned by a stream opened after the node closed.
var ErrLinksClosed = errors.New("federation: node closed: no replication links")

// open opens a stream to addr's node, dialling the link when none is up.
func (ls *links) open(ctx context.Context, addr string) (net.Conn, error) {
	for range 2 { // a link found dead is dialled again once
		l, err := ls.get(ctx, addr)
		if err != nil {
			return nil, err
		}
		st, err := l.sess.OpenStream()
		if err == nil {
			return &linkStream{Stream: st}, nil
		}
		ls.drop(addr, l)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("open a stream on the link to %s: %w", addr, err)
		}
	}
	return nil, fmt.Errorf("open a stream on the link to %s: the link closed twice", addr)
}

// ping asks addr's node for a sign of life on the link to it: one yamux
// ping frame each way, where a control request costs a connection and,
// on a secured port, a TLS handshake at both ends. It dials the link
// when there is none (the handshake once, then kept), and drops a link
// whose ping failed, so the next ping dials again. A ping that outlives
// ctx is a failure; its frame's answer, if it comes, is dropped with it.
// A ping waits behind what the link's streams queued before it:
// Node.probes keeps links that carry pings alone.
func (ls *links) ping(ctx context.Context, addr string) error {
	l, err := ls.get(ctx, addr)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { // ends when the answer comes, or yamux's own timeout, or the link closes
		_, err := l.sess.Ping()
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			ls.drop(addr, l)
			return fmt.Errorf("ping %s on its link: %w", addr, err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// get returns addr's link, dialling it if there is none or it closed.
// Concurrent callers share one dial.
func (ls *links) get(ctx context.Context, addr string) (*link, error) {
	ls.mu.Lock()
	if ls.closed {
		ls.mu.Unlock()
		return nil, ErrLinksClosed
	}
	l, ok := ls.byAddr[addr]
	if ok {
		select {
		case <-l.ready:
			if l.err != nil || l.sess.IsClosed() {
				ok = false
			}
		default:
		}
	}
	if !ok {
		l = &link{ready: make(chan struct{})}
		ls.byAddr[addr] = l
		go ls.dial(l, addr, time.Until(deadline(ctx)))
	}
	ls.mu.Unlock()
	select {
	case <-l.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if l.err != nil {
		return nil, l.err
	}
	return l, nil
}

// dial connects l to addr; a dial that fails leaves l's error for the
// callers waiting on it and the next caller dials again.
func (ls *links) dial(l *link, addr string, timeout time.Duration) {
	defer close(l.ready)
	c, err := ls.m.dial(addr, protoLink, timeout)
	if err != nil {
		l.err = err
		return
	}
	sess, err := yamux.Client(newGatherConn(c), linkConfig())
	if err != nil {
		c.Close()
		l.err = fmt.Errorf("start the link to %s: %w", addr, err)
		return
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed {
		sess.Close()
		l.err = ErrLinksClosed
		return
	}
	l.sess = sess
}

// drop forgets l if it is still addr's link, and closes it.
func (ls *links) drop(addr string, l *link) {
	ls.mu.Lock()
	if ls.byAddr[addr] == l {
		delete(ls.byAddr, addr)
	}
	ls.mu.Unlock()
	l.sess.Close()
}

// close closes every link, and with them their streams.
func (ls *links) close() {
	ls.mu.Lock()
	ls.closed = true
	all := ls.byAddr
	ls.byAddr = map[string]*link{}
	ls.mu.Unlock()
	for _, l := range all {
		<-l.ready
		if l.sess != nil {
			l.sess.Close()
		}
	}
}

// serveLink accepts the streams of a link a peer dialled and serves each
// on a goroutine of its own, until the link or the mux closes.
func (m *mux) serveLink(c net.Conn) {
	peer, named := PeerNodeID(c)
	sess, err := yamux.Server(newGatherConn(c), linkConfig())
	if err != nil {
		c.Close()
		return
	}
	if !m.trackLink(sess) {
		return
	}
	defer m.untrackLink(sess)
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			sess.Close()
			return
		}
		if m.replica == nil { // this node follows nothing
			st.Close()
			continue
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.replica(&linkStream{Stream: st, peer: peer, named: named})
		}()
	}
}

// trackLink keeps sess until it closes, so that close ends it; false
// (sess closed) once the mux has closed.
func (m *mux) trackLink(sess *yamux.Session) bool {
	m.rmu.Lock()
	defer m.rmu.Unlock()
	if m.rclosed {
		sess.Close()
		return false
	}
	m.links[sess] = struct{}{}
	return true
}

func (m *mux) untrackLink(sess *yamux.Session) {
	m.rmu.Lock()
	delete(m.links, sess)
	m.rmu.Unlock()
}

// linkStream is one stream of a link. Close ends it at once on this side,
// as closing a connection does: a Read or Write blocked on it returns.
type linkStream struct {
	*yamux.Stream
	peer  string
	named bool // the link's peer presented a certificate naming peer
	once  sync.Once
}

// PeerNode is the node the link's certificate names (see PeerNodeID).
func (s *linkStream) PeerNode() (string, bool) { return s.peer, s.named }

func (s *linkStream) Close() error {
	var err error
	s.once.Do(func() {
		past := time.Unix(1, 0)
		s.Stream.SetDeadline(past) // wakes a blocked Read or Write
		err = s.Stream.Close()
	})
	return err
}

// gatherConn gathers what yamux's one sending goroutine writes and hands
// it to the connection from a goroutine of its own, one write() for all
// that gathered while the previous one was in the kernel. Up to
// maxGather bytes wait; a Write past that waits for room.
type gatherConn struct {
	net.Conn
	mu      sync.Mutex
	room    *sync.Cond // broadcast when pending was taken, or on an error
	pending []byte
	spare   []byte
	err     error
	ready   chan struct{} // one token: pending has bytes
	done    chan struct{}
	once    sync.Once
}

const maxGather = 256 << 10

func newGatherConn(c net.Conn) *gatherConn {
	g := &gatherConn{Conn: c, ready: make(chan struct{}, 1), done: make(chan struct{})}
	g.room = sync.NewCond(&g.mu)
	go g.flush()
	return g
}

func (g *gatherConn) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.err == nil && len(g.pending) > 0 && len(g.pending)+len(p) > maxGather {
		g.room.Wait()
	}
	if g.err != nil {
		return 0, g.err
	}
	g.pending = append(g.pending, p...)
	select {
	case g.ready <- struct{}{}:
	default:
	}
	return len(p), nil
}

// flush writes what gathered, until the connection fails or closes.
func (g *gatherConn) flush() {
	for {
		select {
		case <-g.ready:
		case <-g.done:
			return
		}
		g.mu.Lock()
		out := g.pending
		g.pending, g.spare = g.spare[:0], nil
		g.room.Broadcast()
		g.mu.Unlock()
		if len(out) == 0 {
			continue
		}
		_, err := g.Conn.Write(out)
		g.mu.Lock()
		if err != nil {
			g.fail(fmt.Errorf("link write: %w", err))
			g.mu.Unlock()
			g.Conn.Close()
			return
		}
		if cap(out) <= maxGather {
			g.spare = out[:0]
		}
		g.mu.Unlock()
	}
}

// fail sets the error every later Write returns; g.mu is held.
func (g *gatherConn) fail(err error) {
	if g.err == nil {
		g.err = err
	}
	g.room.Broadcast()
}

func (g *gatherConn) Close() error {
	g.once.Do(func() {
		g.mu.Lock()
		g.fail(net.ErrClosed)
		g.mu.Unlock()
		close(g.done)
	})
	return g.Conn.Close()
}
