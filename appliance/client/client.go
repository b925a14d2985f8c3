package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// Client is a connection to a Fibril broker that survives connection
// loss: it reconnects with backoff and re-establishes its subscriptions.
// It is safe for concurrent use. Close it when done.
type Client struct {
	addrs    []string // the brokers, in the order Dial was given them
	next     int      // index in addrs of the next address to dial; Dial, then the supervisor only
	opts     Options
	log      *slog.Logger
	corr     atomic.Uint64 // last Corr used; Corr 0 is never sent
	subID    atomic.Uint32 // last SubID used
	inflight chan struct{} // one token per publish awaiting its Confirm
	pubs     *outstanding  // the same publishes, for Flush

	life    context.Context // cancelled by Close: stops reconnecting
	stop    context.CancelFunc
	closing chan struct{} // closed when Close starts
	wg      sync.WaitGroup
	once    sync.Once

	mu     sync.Mutex // guards the fields below
	cur    *conn      // the connection for new requests; nil while reconnecting
	ready  chan struct{}
	closed bool
	failed error // the connection was lost with DisableReconnect set
	subs   map[uint32]*Consumer
}

// Dial connects to the broker at addr (host:port; the broker's default
// port is 7420) and completes the protocol's Hello within ctx and
// opts.DialTimeout. A refused token is ErrUnauthorized. Later connection
// losses are repaired in the background (see Options.DisableReconnect).
//
// addr may list several brokers, the nodes of a cluster, separated by
// commas: "10.0.0.1:7420,10.0.0.2:7420,10.0.0.3:7420". Dial tries them in
// order, each within DialTimeout, until one connects; if none does, its
// error names every address tried with that address's error. After a
// lost connection the client reconnects to the next address in the list
// first, going round it (see Options.DisableReconnect for the backoff).
func Dial(ctx context.Context, addr string, opts Options) (*Client, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	addrs, err := splitAddrs(addr)
	if err != nil {
		return nil, err
	}
	o := opts.withDefaults()
	life, stop := context.WithCancel(context.Background())
	c := &Client{
		addrs:    addrs,
		opts:     o,
		log:      o.Logger,
		inflight: make(chan struct{}, o.MaxInFlight),
		pubs:     newOutstanding(),
		life:     life,
		stop:     stop,
		closing:  make(chan struct{}),
		ready:    make(chan struct{}),
		subs:     make(map[uint32]*Consumer),
	}
	cn, err := c.dialFirst(ctx)
	if err != nil {
		stop()
		return nil, err
	}
	c.install(cn)
	c.wg.Add(1)
	go c.supervise(cn)
	return c, nil
}

// Addr is the address of the broker the client is connected to now, as
// written in Dial's addr (one entry of its list); "" while it has no
// connection (reconnecting, or closed).
func (c *Client) Addr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil {
		return ""
	}
	return c.cur.addr
}

// Close ends the client. Consumers stop taking deliveries and their
// handlers' contexts are cancelled; the client waits for running handlers
// and sends their settles, then says Goodbye, lets the broker answer the
// requests it has already read (up to Options.CloseTimeout), and closes
// the connection. Requests still unanswered then fail with an error
// matching ErrClosed and ErrConnectionLost; later calls fail with
// ErrClosed. Close waits for every goroutine the client started.
func (c *Client) Close() error {
	c.once.Do(c.close)
	return nil
}

func (c *Client) close() {
	c.mu.Lock()
	c.closed = true
	close(c.closing)
	cn := c.cur
	subs := make([]*Consumer, 0, len(c.subs))
	for _, s := range c.subs {
		subs = append(subs, s)
	}
	c.mu.Unlock()

	for _, s := range subs {
		s.shutdown(nil, false) // Goodbye ends their subscriptions
	}
	if cn != nil {
		cn.goodbye()
		t := time.NewTimer(c.opts.CloseTimeout)
		select {
		case <-cn.done:
		case <-t.C:
		}
		t.Stop()
		cn.fail(ErrClosed)
		cn.wait()
	}
	c.stop() // no more reconnecting; the supervisor ends any connection it holds
	c.wg.Wait()
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *Client) nextCorr() uint64 { return c.corr.Add(1) }

// current is the connection for a request that does not wait for one.
func (c *Client) current() (*conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return nil, ErrClosed
	case c.failed != nil:
		return nil, c.failed
	case c.cur == nil:
		return nil, ErrNotConnected
	}
	return c.cur, nil
}

// waitConn returns the connection for a request, waiting while the client
// reconnects.
func (c *Client) waitConn(ctx context.Context) (*conn, error) {
	for {
		cn, err := c.current()
		if !errors.Is(err, ErrNotConnected) {
			return cn, err
		}
		c.mu.Lock()
		ready := c.ready
		c.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (waiting for a connection)", ctx.Err())
		case <-c.closing:
			return nil, ErrClosed
		}
	}
}

// send registers and queues a request on the current connection, waiting
// for one if wait is set. reply is called exactly once if send returns
// nil, never otherwise.
func (c *Client) send(ctx context.Context, wait bool, f wire.Frame, corr *uint64, check func(*conn) error, reply replyFunc) error {
	for {
		var cn *conn
		var err error
		if wait {
			cn, err = c.waitConn(ctx)
		} else {
			cn, err = c.current()
		}
		if err != nil {
			return err
		}
		if check != nil {
			if err := check(cn); err != nil {
				return err
			}
		}
		err = cn.request(ctx, f, corr, reply)
		if !errors.Is(err, errUnusable) {
			return err
		}
		c.connUnusable(cn) // nothing was sent: try the next connection
	}
}

type answer struct {
	f   wire.Frame
	err error
}

// roundTrip sends a request and waits for its answer. If ctx ends first
// the request may still take effect.
func (c *Client) roundTrip(ctx context.Context, f wire.Frame, corr *uint64) (wire.Frame, error) {
	return c.roundTripChecked(ctx, f, corr, nil)
}

// roundTripChecked is roundTrip with check asked of the connection before
// the request goes on it (send).
func (c *Client) roundTripChecked(ctx context.Context, f wire.Frame, corr *uint64, check func(*conn) error) (wire.Frame, error) {
	ch := make(chan answer, 1)
	err := c.send(ctx, true, f, corr, check, func(f wire.Frame, err error) { ch <- answer{f, err} })
	if err != nil {
		return nil, err
	}
	select {
	case a := <-ch:
		return a.f, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
