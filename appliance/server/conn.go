package server

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/wire"
	"github.com/fibril-edge/fibril/internal/preauth"
)

// helloMaxFrame caps the first frame, read before the client is
// authenticated: a Hello with the longest token and client name fits.
const helloMaxFrame = 1 + 2 + 2*(2+1<<16)

// minVersion is the lowest protocol version the server speaks.
const minVersion = wire.MinVersion

// defaultLinger is how long a connection whose last frame went out stays
// open for the peer to close its side, and how long a shutdown waits for
// the peer's Goodbye.
const defaultLinger = 2 * time.Second

// conn is one client connection. The reader goroutine (serve) owns r, rc
// and subs; the writer goroutine (runWriter) owns the wire.Writer.
type conn struct {
	s   *Server
	nc  net.Conn // the connection frames travel on (TLS if configured)
	raw net.Conn // the TCP connection under nc
	id  uint64
	log *slog.Logger

	r    *wire.Reader
	rc   *readClock
	out  *outbox
	subs map[uint32]*subscription // reader only
	pub  *appliance.Publisher     // reader only: the publishes read from one buffer share an append

	stats sessionStats // set at the Hello, before ready (sessions.go)

	admitted bool           // counted as a session; under Server.mu
	pre      *preauth.Entry // in Server.preHello until the Hello is admitted; set at accept

	done       chan struct{} // closed by close
	closeOnce  sync.Once
	peerBye    chan struct{} // closed when the client says Goodbye
	byeOnce    sync.Once
	writerDone chan struct{}
	noDeliver  atomic.Bool // set once the connection drains: deliveries are dropped (and released on close)
	ready      atomic.Bool // HelloOK is queued
	shed       atomic.Bool // closing a slow consumer: the writer skips the deliveries it holds
	paused     atomic.Bool // over the delivery budget: its subscriptions take no deliveries; written under pauseMu
	// orderBroken: a forwarded publish failed where a later one could
	// overtake it (appliance.ErrForwardBroken); the connection is ending.
	orderBroken atomic.Bool

	pauseMu sync.Mutex                 // guards live, and is held while the subscriptions are paused or resumed
	live    map[*subscription]Consumer // the connection's subscriptions, for setPaused

	mu       sync.Mutex // guards the fields below
	draining bool
	inflight int           // requests read whose reply is not queued yet
	drained  chan struct{} // closed when draining and inflight reaches 0
	linger   *time.Timer
}

func newConn(s *Server, nc, raw net.Conn, id uint64) *conn {
	c := &conn{
		s: s, nc: nc, raw: raw, id: id,
		log:        s.log.With("session", id, "remote", raw.RemoteAddr().String()),
		out:        newOutbox(s.opts.MaxFrame, &s.budget),
		live:       make(map[*subscription]Consumer),
		subs:       make(map[uint32]*subscription),
		pub:        s.b.NewPublisher(),
		done:       make(chan struct{}),
		peerBye:    make(chan struct{}),
		writerDone: make(chan struct{}),
	}
	c.rc = &readClock{nc: nc, frameTimeout: s.opts.FrameTimeout}
	// A publish's body is done with once the broker has encoded its
	// record, before the next frame is read: it is not copied out of the
	// read buffer (Broker.PublishAsync, Cluster.Forward).
	c.r = wire.NewReader(c.rc, wire.Options{MaxFrame: s.opts.MaxFrame, BufferSize: preHelloBuffer, BorrowPublishBodies: true})
	return c
}

// serve runs the connection's reader: the Hello, then one frame after the
// other until the connection ends. The writer starts once the Hello is
// read (or has failed): before that nothing may be sent.
func (c *conn) serve() {
	f, err := c.readHello()
	select {
	case <-c.done: // evicted or shut down while waiting: nothing to send
		close(c.writerDone)
		return
	default:
	}
	go c.runWriter()
	if !c.hello(f, err) {
		return
	}
	c.r.SetBufferSize(wire.DefaultBufferSize)
	// The publishes read back to back are held and go together once the
	// buffer holds no whole frame more, before anything that may wait,
	// before any other request, and when the connection ends.
	defer c.pub.Flush()
	for {
		if !c.r.FrameBuffered() {
			c.pub.Flush()
		}
		if !c.waitRoom() {
			return
		}
		if !c.r.FrameBuffered() { // else the read touches no connection: no deadline to move
			c.rc.arm(c.r.Buffered() > 0, c.idleDeadline())
		}
		f, err := c.r.ReadFrame()
		if err != nil {
			c.readFailed(err, false)
			return
		}
		if _, ok := f.(*wire.Publish); !ok {
			c.pub.Flush()
		}
		if !c.handle(f) {
			return
		}
	}
}

// readHello reads the first frame, within the deadline set at accept
// and at most helloMaxFrame long: the length is checked before anything
// is allocated for the frame, and a longer one is a protocol violation.
func (c *conn) readHello() (wire.Frame, error) {
	c.r.SetMaxFrame(min(helloMaxFrame, c.s.opts.MaxFrame))
	return c.r.ReadFrame()
}

// hello answers the first frame.
func (c *conn) hello(f wire.Frame, err error) bool {
	if err != nil {
		c.readFailed(err, true)
		return false
	}
	h, ok := f.(*wire.Hello)
	if !ok {
		c.violation(wire.CodeBadRequest, fmt.Sprintf("the first frame must be Hello, not %s", f.Type()))
		return false
	}
	if h.Version < minVersion {
		c.refuse(wire.CodeUnsupportedVersion, fmt.Sprintf("server speaks versions %d to %d", minVersion, wire.Version))
		return false
	}
	if !c.s.authorized(h.Token) {
		c.refuse(wire.CodeUnauthorized, "wrong or missing token")
		return false
	}
	if !c.s.admit(c) {
		c.s.refused.Add(1)
		c.refuse(wire.CodeUnavailable, fmt.Sprintf("too many connections: this broker serves at most %d (server.max_connections)",
			c.s.opts.MaxConnections))
		return false
	}
	c.r.SetMaxFrame(c.s.opts.MaxFrame)
	c.r.SetVersion(min(h.Version, wire.Version))
	c.stats.client, c.stats.version, c.stats.since = clip(h.ClientName, 64), min(h.Version, wire.Version), time.Now()
	c.push(&wire.HelloOK{
		Version:         min(h.Version, wire.Version),
		ServerName:      c.s.opts.ServerName,
		SessionID:       c.id,
		MaxFrame:        uint32(c.s.opts.MaxFrame),
		HeartbeatMillis: uint32(c.s.opts.Heartbeat / time.Millisecond),
	})
	c.ready.Store(true)
	c.log.Debug("client connected", "client", clip(h.ClientName, 64), "version", min(h.Version, wire.Version))
	return true
}

// idleDeadline is when a connection that sends nothing is closed: three
// heartbeat intervals from now, or never without heartbeats.
func (c *conn) idleDeadline() time.Time {
	if hb := c.s.opts.Heartbeat; hb > 0 {
		return time.Now().Add(3 * hb)
	}
	return time.Time{}
}

// readFailed logs why reading stopped and, for a protocol violation,
// answers it.
func (c *conn) readFailed(err error, inHello bool) {
	c.pub.Flush() // the publishes read before it are appended, and confirmed if they can be
	var ne net.Error
	select {
	case <-c.done:
		return // closed on purpose; whoever closed it logged why
	default:
	}
	switch {
	case errors.Is(err, wire.ErrProtocol):
		c.violation(wire.CodeOf(err), err.Error())
	case err == io.EOF && !inHello:
		// The client may have only shut its write side: send it the
		// replies it is owed before closing.
		c.log.Debug("client closed the connection")
		c.goodbye()
		c.finish()
	case err == io.EOF:
		c.log.Debug("client closed the connection before its Hello")
	case errors.As(err, &ne) && ne.Timeout():
		switch {
		case inHello && c.pre.Short():
			c.s.helloTimeouts.Add(1) // a flood: counted, not logged one by one
			c.log.Debug("no Hello within the shortened handshake timeout; closing", "timeout", c.s.opts.PressureHelloTimeout)
		case inHello:
			c.s.helloTimeouts.Add(1)
			c.log.Warn("no Hello within the handshake timeout; closing", "timeout", c.s.opts.HelloTimeout)
		case c.rc.inFrame():
			c.log.Warn("frame not completed within the frame timeout; closing", "timeout", c.s.opts.FrameTimeout)
		default:
			c.log.Info("client silent for three heartbeat intervals; closing", "heartbeat", c.s.opts.Heartbeat)
		}
	default:
		c.log.Debug("connection ended", "err", err)
	}
}

// violation answers a protocol violation with Error{Corr 0} and ends the
// connection.
func (c *conn) violation(code wire.ErrorCode, msg string) {
	c.pub.Flush() // on the reader, like every caller: the publishes read before it go first
	c.log.Warn("protocol violation; closing connection", "code", code, "err", msg)
	c.closeWith(code, msg)
}

// refuse turns a Hello down with Error{Corr 0} and ends the connection.
func (c *conn) refuse(code wire.ErrorCode, msg string) {
	c.log.Warn("hello refused; closing connection", "code", code, "reason", msg)
	c.closeWith(code, msg)
}

// closeWith queues Error{Corr 0} as the connection's last frame, then
// reads and discards what the client still sends until the client closes
// (or the linger after the last frame ends), and waits for the writer, so
// the error reaches the client instead of being cut off by a reset.
func (c *conn) closeWith(code wire.ErrorCode, msg string) {
	c.enqueue(outFrame{frame: &wire.Error{Code: code, Message: clip(msg, 1024)}, size: 64, closing: true})
	c.finish()
}

// finish waits, for at most WriteTimeout plus the linger time, for the
// writer to send the last frame queued, discarding what the client sends
// meanwhile.
func (c *conn) finish() {
	c.nc.SetReadDeadline(time.Now().Add(c.s.opts.WriteTimeout + c.s.linger))
	io.Copy(io.Discard, c.nc)
	t := time.NewTimer(c.s.opts.WriteTimeout + c.s.linger)
	defer t.Stop()
	select {
	case <-c.writerDone:
	case <-t.C:
	}
}

// waitRoom holds the reader while the outbox is over its soft limit, for
// at most WriteTimeout.
func (c *conn) waitRoom() bool {
	room := c.out.roomWait()
	if room == nil {
		return true
	}
	c.pub.Flush()
	t := time.NewTimer(c.s.opts.WriteTimeout)
	defer t.Stop()
	for room != nil {
		select {
		case <-room:
		case <-c.done:
			return false
		case <-t.C:
			c.log.Warn("client is not reading its replies; closing", "timeout", c.s.opts.WriteTimeout)
			return false
		}
		room = c.out.roomWait()
	}
	return true
}

// push queues a frame for the writer without waiting.
func (c *conn) push(f wire.Frame) { c.enqueue(outFrame{frame: f, size: frameSize(f)}) }

func (c *conn) enqueue(f outFrame) {
	if _, err := c.out.push(f); err != nil {
		c.log.Warn("closing connection", "err", err)
		c.close()
	}
}

// begin registers a request whose reply is still to come; it fails once
// the connection drains.
func (c *conn) begin() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.draining {
		return false
	}
	c.inflight++
	return true
}

// end says a request's reply is queued.
func (c *conn) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inflight--
	if c.inflight == 0 && c.drained != nil {
		close(c.drained)
		c.drained = nil
	}
}

// drain starts a graceful close: no new deliveries or requests (those
// read from now on get CodeUnavailable), and once every request read has
// its reply queued, a last frame and the end of the connection. After a
// client's Goodbye (bye empty) the last frame is the server's Goodbye.
// Otherwise (shutdown, a slow consumer) the server says Goodbye{bye}
// first, and ends the connection once the client has said Goodbye too
// (or after the linger time).
func (c *conn) drain(bye string) {
	serverFirst := bye != ""
	if serverFirst && !c.ready.Load() {
		c.close() // still in its Hello: nothing to finish, and nothing may precede HelloOK
		return
	}
	c.mu.Lock()
	if c.draining {
		c.mu.Unlock()
		return
	}
	c.draining = true
	c.noDeliver.Store(true)
	idle := make(chan struct{})
	if c.inflight == 0 {
		close(idle)
	} else {
		c.drained = idle
	}
	c.mu.Unlock()
	if !serverFirst {
		go func() {
			select {
			case <-idle:
				c.enqueue(outFrame{frame: &wire.Goodbye{}, size: 64, closing: true})
			case <-c.done:
			}
		}()
		return
	}
	c.push(&wire.Goodbye{Reason: clip(bye, 1024)})
	go func() {
		grace := time.NewTimer(c.s.linger)
		defer grace.Stop()
		select {
		case <-c.peerBye:
		case <-grace.C:
		case <-c.done:
			return
		}
		select {
		case <-idle:
			c.enqueue(outFrame{closing: true})
		case <-c.done:
		}
	}()
}

// goodbye handles the client's Goodbye.
func (c *conn) goodbye() {
	c.byeOnce.Do(func() { close(c.peerBye) })
	c.drain("")
}

// pushDelivery queues a Deliver frame, counted in the delivery budget
// until the writer has written it, and reports whether the total is now
// past the budget.
func (c *conn) pushDelivery(f *wire.Deliver) (over bool) {
	ok, total, err := c.out.pushDelivery(outFrame{frame: f, size: frameSize(f), delivery: true})
	if err != nil {
		c.log.Warn("closing connection", "err", err)
		c.close()
		return false
	}
	b := &c.s.budget
	return ok && b.limit > 0 && total > b.limit
}

// setPaused pauses or resumes every subscription of the connection, and
// those it opens while paused. A subscription served by another cluster
// node cannot be paused: its deliveries keep coming until the grace
// period ends.
func (c *conn) setPaused(paused bool) {
	c.pauseMu.Lock()
	defer c.pauseMu.Unlock()
	c.paused.Store(paused)
	for _, sub := range c.live {
		pauseConsumer(sub, paused)
	}
}

// live registers a subscription for setPaused, pausing it if the
// connection is paused; gone removes it.
func (c *conn) addLive(s *subscription, sub Consumer) {
	c.pauseMu.Lock()
	defer c.pauseMu.Unlock()
	c.live[s] = sub
	if c.paused.Load() {
		pauseConsumer(sub, true)
	}
}

func (c *conn) removeLive(s *subscription) {
	c.pauseMu.Lock()
	delete(c.live, s)
	c.pauseMu.Unlock()
}

func pauseConsumer(sub Consumer, paused bool) {
	p, ok := sub.(interface {
		Pause()
		Resume()
	})
	switch {
	case !ok:
	case paused:
		p.Pause()
	default:
		p.Resume()
	}
}

// shedDeliveries ends a slow consumer's connection: what is queued to it
// but not written is dropped (its deliveries are released when the
// connection closes), and it is sent Goodbye{reason} and closed.
func (c *conn) shedDeliveries(reason string) {
	c.shed.Store(true)
	c.out.dropDeliveries()
	c.drain(reason)
}

// closeWrite shuts the write side down after the last frame went out and
// gives the client the linger time to close its side.
func (c *conn) closeWrite() {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	c.mu.Lock()
	c.linger = time.AfterFunc(c.s.linger, c.close)
	c.mu.Unlock()
}

// close ends the connection at once. Safe from any goroutine.
func (c *conn) close() {
	c.closeOnce.Do(func() {
		close(c.done)
		c.out.end()
		c.raw.Close()
	})
}

// teardown runs on the reader goroutine once it stops: it closes the
// connection and its subscriptions, so what they held unsettled is ready
// again, and waits for the writer.
func (c *conn) teardown() {
	c.close()
	for id, s := range c.subs {
		s.end()
		delete(c.subs, id)
	}
	<-c.writerDone
	c.mu.Lock()
	if c.linger != nil {
		c.linger.Stop()
	}
	c.mu.Unlock()
	c.log.Debug("connection closed")
}

// recoverPanic is deferred by every goroutine and callback that serves the
// connection: a panic is logged and closes this connection only.
func (c *conn) recoverPanic(where string) {
	if r := recover(); r != nil {
		c.log.Error("panic while serving a connection; closing it", "in", where, "panic", r, "stack", string(debug.Stack()))
		c.close()
	}
}

// clip shortens s to at most n bytes of valid UTF-8.
func clip(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return toValidUTF8(s)
}
