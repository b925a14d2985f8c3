package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// outQueue is how many frames callers may queue for a connection's writer
// before they wait.
const outQueue = 256

// drainBatch caps the frames the writer takes from its queue before it
// writes pending settles and flushes.
const drainBatch = 256

// replyFunc receives a request's answer: the reply frame, or an error (an
// *Error from the broker, or a lost-connection error). It runs on the
// connection's reader goroutine, or on whichever goroutine fails the
// connection, and must not block.
type replyFunc func(f wire.Frame, err error)

// outFrame is a frame queued for the writer; corr is the request's Corr, or
// 0 for a frame without one.
type outFrame struct {
	f    wire.Frame
	corr uint64
}

// errGoodbyeDone ends a connection whose Goodbyes were exchanged.
var errGoodbyeDone = errors.New("client: connection closed after goodbye")

// errUnusable: the connection is dead or closing; the request was not
// registered and nothing was sent.
var errUnusable = errors.New("client: connection closing")

// conn is one connection to the broker, with a reader goroutine (answers,
// deliveries, heartbeat silence) and a writer goroutine (queued frames,
// batched settles, heartbeats, Goodbye). Requests are registered in
// pending by Corr before they are queued; each registered request is
// answered exactly once, by its reply or by fail.
type conn struct {
	client   *Client
	addr     string // the address dialled, as listed in Dial's addr
	nc       net.Conn
	r        *wire.Reader // reader goroutine only
	w        *wire.Writer // writer goroutine only
	session  uint64
	version  uint16 // the protocol version the broker chose
	server   string
	maxFrame int
	sendIdle time.Duration // send a Heartbeat after this much silence; 0: never
	silence  time.Duration // close after receiving nothing for this long; 0: never

	out  chan outFrame
	wake chan struct{} // cap 1: settles, control frames or Goodbye are waiting
	done chan struct{} // closed by fail
	wg   sync.WaitGroup
	dead atomic.Bool

	subs map[uint32]*Consumer // active subscriptions; reader goroutine only

	mu          sync.Mutex // guards the fields below
	pending     map[uint64]replyFunc
	settles     settleBatch
	control     []wire.Frame // frames queued by the reader, which must not block
	draining    bool         // a Goodbye was sent or received: no new requests
	peerGoodbye bool
	wantGoodbye bool
	goodbyeSent bool
	enqueuing   int   // requests registered and not yet queued on out
	remoteErr   error // an Error with Corr 0: why the broker is closing us
	err         error // why the connection ended
}

func newConn(c *Client, addr string, nc net.Conn, r *wire.Reader, w *wire.Writer, ok *wire.HelloOK) *conn {
	cn := &conn{
		client:   c,
		addr:     addr,
		nc:       nc,
		r:        r,
		w:        w,
		session:  ok.SessionID,
		server:   ok.ServerName,
		version:  ok.Version,
		maxFrame: w.MaxFrame(),
		out:      make(chan outFrame, outQueue),
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		subs:     make(map[uint32]*Consumer),
		pending:  make(map[uint64]replyFunc),
	}
	if h := time.Duration(ok.HeartbeatMillis) * time.Millisecond; h > 0 {
		cn.sendIdle = h
		if hb := c.opts.Heartbeat; hb > 0 && hb < h {
			cn.sendIdle = hb
		}
		cn.silence = 3 * h
	}
	return cn
}

func (cn *conn) start() {
	cn.wg.Add(2)
	go cn.readLoop()
	go cn.writeLoop()
}

// wait returns once both goroutines have exited; call it after fail.
func (cn *conn) wait() { cn.wg.Wait() }

// request registers reply under a new Corr (stored through corr into f)
// and queues f. On a nil return reply will be called exactly once; on an
// error it never is. errUnusable means nothing was sent and the request
// can go on another connection.
func (cn *conn) request(ctx context.Context, f wire.Frame, corr *uint64, reply replyFunc) error {
	id := cn.client.nextCorr()
	*corr = id
	cn.mu.Lock()
	if cn.dead.Load() || cn.draining {
		cn.mu.Unlock()
		return errUnusable
	}
	cn.pending[id] = reply
	cn.enqueuing++
	cn.mu.Unlock()
	defer cn.enqueued()

	select {
	case cn.out <- outFrame{f: f, corr: id}:
		return nil
	case <-cn.done:
		if cn.take(id) != nil {
			return errUnusable
		}
		return nil // fail answered it
	case <-ctx.Done():
		if cn.take(id) != nil {
			return ctx.Err()
		}
		return nil // answered meanwhile
	}
}

// enqueued ends a request's hand-over to the writer; a Goodbye waits for
// every request registered before it to be queued.
func (cn *conn) enqueued() {
	cn.mu.Lock()
	cn.enqueuing--
	wake := cn.enqueuing == 0 && cn.wantGoodbye
	cn.mu.Unlock()
	if wake {
		cn.signal()
	}
}

// take removes and returns a pending request's reply, or nil if it was
// answered already.
func (cn *conn) take(corr uint64) replyFunc {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	r := cn.pending[corr]
	delete(cn.pending, corr)
	cn.maybeGoodbyeLocked()
	return r
}

// complete answers a pending request, if it still is.
func (cn *conn) complete(corr uint64, f wire.Frame, err error) {
	if r := cn.take(corr); r != nil {
		r(f, err)
	}
}

// sendLater queues a request from a goroutine that must not block (the
// reader); its answer is ignored.
func (cn *conn) sendLater(f wire.Frame, corr *uint64) {
	id := cn.client.nextCorr()
	*corr = id
	cn.mu.Lock()
	if cn.dead.Load() || cn.goodbyeSent {
		cn.mu.Unlock()
		return
	}
	cn.pending[id] = func(wire.Frame, error) {}
	cn.control = append(cn.control, f)
	cn.mu.Unlock()
	cn.signal()
}

// ended reports whether the connection takes no more settles.
func (cn *conn) ended() bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.dead.Load() || cn.goodbyeSent
}

// settle queues a tag for the next Ack or Nack frame of subID.
func (cn *conn) settle(subID uint32, kind settleKind, delayMillis uint32, tag uint64) error {
	cn.mu.Lock()
	if cn.dead.Load() || cn.goodbyeSent {
		cn.mu.Unlock()
		return ErrStaleDelivery
	}
	cn.settles.add(subID, kind, delayMillis, tag)
	cn.mu.Unlock()
	cn.signal()
	return nil
}

func (cn *conn) signal() {
	select {
	case cn.wake <- struct{}{}:
	default:
	}
}

// goodbye starts a graceful close: no new requests, settles already queued
// go first, then Goodbye; the broker answers what it has read, sends its
// own Goodbye and closes.
func (cn *conn) goodbye() {
	cn.mu.Lock()
	cn.draining = true
	cn.wantGoodbye = true
	cn.mu.Unlock()
	cn.client.connUnusable(cn)
	cn.signal()
}

// maybeGoodbyeLocked answers the broker's Goodbye once nothing is pending.
func (cn *conn) maybeGoodbyeLocked() {
	if cn.peerGoodbye && !cn.wantGoodbye && len(cn.pending) == 0 {
		cn.wantGoodbye = true
		cn.signal()
	}
}

// fail ends the connection: it closes the socket, stops both goroutines
// and answers every pending request with a lost-connection error. Only the
// first call counts.
func (cn *conn) fail(cause error) {
	cn.mu.Lock()
	if cn.dead.Load() {
		cn.mu.Unlock()
		return
	}
	if cn.remoteErr != nil && !errors.Is(cause, ErrClosed) {
		cause = cn.remoteErr
	}
	cn.dead.Store(true)
	cn.err = cause
	pending := cn.pending
	cn.pending = nil
	cn.settles = settleBatch{}
	cn.control = nil
	cn.mu.Unlock()

	close(cn.done)
	cn.nc.Close()
	cn.client.connUnusable(cn)
	lost := lostError(cause, cn.client.isClosed())
	for _, r := range pending {
		r(nil, lost)
	}
}

// cause is why the connection ended; nil while it lives.
func (cn *conn) cause() error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.err
}

func (cn *conn) readLoop() {
	defer cn.wg.Done()
	for {
		// The deadline matters only when the next frame is not buffered.
		if cn.silence > 0 && cn.r.Buffered() == 0 {
			cn.nc.SetReadDeadline(time.Now().Add(cn.silence))
		}
		f, err := cn.r.ReadFrame()
		if err != nil {
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				err = fmt.Errorf("client: nothing received from the broker for %v", cn.silence)
			case errors.Is(err, io.EOF):
				err = errors.New("client: connection closed by the broker")
			}
			cn.fail(err)
			return
		}
		if err := cn.handle(f); err != nil {
			cn.fail(err)
			return
		}
	}
}

// handle acts on one frame from the broker; an error ends the connection.
func (cn *conn) handle(f wire.Frame) error {
	switch f := f.(type) {
	case *wire.Confirm:
		cn.complete(f.Corr, f, nil)
	case *wire.Deliver:
		if s := cn.subs[f.SubID]; s != nil {
			s.push(cn, f)
		}
	case *wire.Declared:
		cn.complete(f.Corr, f, nil)
	case *wire.QueueInfoReply:
		cn.complete(f.Corr, f, nil)
	case *wire.Purged:
		cn.complete(f.Corr, f, nil)
	case *wire.Deleted:
		cn.complete(f.Corr, f, nil)
	case *wire.Subscribed:
		cn.complete(f.Corr, f, nil)
	case *wire.Unsubscribed:
		if f.Corr == 0 { // unasked: the broker ended it
			if s := cn.subs[f.SubID]; s != nil {
				delete(cn.subs, f.SubID)
				s.brokerEnded(cn)
			}
			return nil
		}
		delete(cn.subs, f.SubID)
		cn.complete(f.Corr, f, nil)
	case *wire.SettleError:
		if s := cn.subs[f.SubID]; s != nil {
			s.report(fmt.Errorf("client: settle of tag %d on queue %s: %w", f.Tag, s.queue,
				&Error{Code: f.Code, Message: f.Message}))
		}
	case *wire.Error:
		if f.Corr != 0 {
			cn.complete(f.Corr, nil, remoteError(f))
			return nil
		}
		cn.mu.Lock()
		cn.remoteErr = remoteError(f)
		cn.mu.Unlock()
		cn.client.log.Warn("fibril: broker closing the connection", "addr", cn.addr, "session", cn.session, "err", f)
	case *wire.Heartbeat:
	case *wire.Goodbye:
		cn.mu.Lock()
		mine := cn.goodbyeSent
		cn.peerGoodbye = true
		cn.draining = true
		cn.maybeGoodbyeLocked()
		cn.mu.Unlock()
		if mine {
			return errGoodbyeDone
		}
		cn.client.log.Info("fibril: broker said goodbye", "addr", cn.addr, "session", cn.session, "reason", f.Reason)
		cn.client.connUnusable(cn)
	default:
		return fmt.Errorf("client: unexpected %s frame from the broker", f.Type())
	}
	return nil
}
