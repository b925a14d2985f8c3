package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/internal/bearer"
	"github.com/fibril-edge/fibril/internal/preauth"
)

// ErrServerClosed is returned by Serve and ListenAndServe after Shutdown.
var ErrServerClosed = errors.New("server: closed")

// Server serves the client protocol for one broker.
type Server struct {
	b      *appliance.Broker
	opts   Options
	log    *slog.Logger
	tokens *bearer.Set   // Options.Tokens, until SetTokens replaces them
	linger time.Duration // defaultLinger; tests shorten it before serving

	nextSession   atomic.Uint64
	refused       atomic.Uint64  // connections turned away by MaxConnections
	helloTimeouts atomic.Uint64  // connections closed for no Hello within their timeout
	budget        deliveryBudget // Deliver bytes queued on every connection (budget.go)

	mu        sync.Mutex // guards the fields below
	listeners map[net.Listener]struct{}
	addr      net.Addr // the first listener's
	conns     map[*conn]struct{}
	sessions  int          // connections past their Hello, bounded by MaxConnections
	preHello  *preauth.Set // connections not authenticated yet, bounded by MaxPreHello (prehello.go)
	closing   bool
	wg        sync.WaitGroup // one per connection; Add only under mu while !closing
}

// New returns a server for b. It does not listen until Serve or
// ListenAndServe.
func New(b *appliance.Broker, opts Options) (*Server, error) {
	if b == nil {
		return nil, errors.New("server: nil broker")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	s := &Server{
		b: b, opts: opts, log: opts.Logger, linger: defaultLinger,
		budget:    deliveryBudget{limit: opts.DeliveryBudget, grace: opts.SlowConsumerGrace},
		listeners: make(map[net.Listener]struct{}),
		conns:     make(map[*conn]struct{}),
		preHello:  newPreHelloSet(opts),
	}
	s.budget.within = s.resumeCaughtUp
	s.tokens = bearer.NewSet(opts.Tokens)
	return s, nil
}

// ListenAndServe listens on Options.Addr and serves until Shutdown, when
// it returns ErrServerClosed.
func (s *Server) ListenAndServe() error {
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("server: listen: %w", err)
	}
	return s.Serve(ln)
}

// Serve accepts connections on ln until Shutdown (then it returns
// ErrServerClosed) or until ln fails. It closes ln before returning.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	if s.addr == nil {
		s.addr = ln.Addr()
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
		ln.Close()
	}()
	if s.tokens.Empty() && !isLoopback(ln.Addr()) {
		s.log.Warn("serving without authentication on a non-loopback address; configure tokens", "addr", ln.Addr().String())
	}
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.isClosing() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; retrying", "err", err, "in", backoff)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("server: accept: %w", err)
		}
		backoff = 0
		s.start(nc)
	}
}

// isTemporary reports accept errors worth retrying, such as running out of
// file descriptors.
func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

func isLoopback(a net.Addr) bool {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.IsLoopback()
	}
	return false
}

// start registers a connection and runs it, unless the server is shutting
// down.
func (s *Server) start(nc net.Conn) {
	raw := nc
	if s.opts.TLS != nil {
		nc = tls.Server(nc, s.opts.TLS)
	}
	c := newConn(s, nc, raw, s.nextSession.Add(1))
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		raw.Close()
		return
	}
	evict := s.addPreHello(c, time.Now())
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	if evict != nil {
		evict.Evict()
	}
	go s.serveConn(c)
}

func (s *Server) serveConn(c *conn) {
	defer s.wg.Done()
	defer func() {
		c.teardown()
		s.forgetBudget(c)
		s.mu.Lock()
		delete(s.conns, c)
		s.preHello.Done(c.pre)
		if c.admitted {
			s.sessions--
		}
		s.mu.Unlock()
	}()
	defer c.recoverPanic("reader")
	c.serve()
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// Addr is the address of the first listener Serve was given, or nil.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// admit counts c as a session unless MaxConnections are open already.
func (s *Server) admit(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if max := s.opts.MaxConnections; max > 0 && s.sessions >= max {
		return false
	}
	s.sessions++
	c.admitted = true
	s.preHello.Done(c.pre)
	return true
}

// Refused is how many connections MaxConnections has turned away.
func (s *Server) Refused() uint64 { return s.refused.Load() }

// PreHello is the number of connections that have not authenticated yet.
func (s *Server) PreHello() int { return s.preHello.Len() }

// PreHelloEvicted is how many connections waiting for their Hello were
// closed to make room under MaxPreHello or MaxPreHelloPerSource.
func (s *Server) PreHelloEvicted() uint64 { return s.preHello.Evicted() }

// HelloTimeouts is how many connections were closed for sending no Hello
// within their timeout.
func (s *Server) HelloTimeouts() uint64 { return s.helloTimeouts.Load() }

// Connections is the number of open client connections.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Shutdown stops accepting, says Goodbye on every connection, lets the
// replies of requests already read go out, then closes the connections and
// their subscriptions (whose unsettled deliveries become ready again). If
// ctx ends first the remaining connections are closed at once and
// Shutdown returns ctx's error. It does not close the broker.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	for ln := range s.listeners {
		ln.Close()
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	if len(conns) > 0 {
		s.log.Info("closing client connections", "connections", len(conns))
	}
	for _, c := range conns {
		c.drain("shutting down")
	}
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	for c := range s.conns {
		c.close()
	}
	s.mu.Unlock()
	<-done
	return fmt.Errorf("server: shutdown: %w", ctx.Err())
}

// authorized compares token with every configured token in constant time.
func (s *Server) authorized(token string) bool {
	return s.tokens.Empty() || s.tokens.Match(token)
}

// SetTokens replaces the accepted Hello tokens (a reload). Connections
// that said Hello before keep going; each new one is checked against the
// new set. An empty token is refused, as in Options.
func (s *Server) SetTokens(tokens []string) error {
	for _, t := range tokens {
		if t == "" {
			return errors.New("server: empty token")
		}
	}
	s.tokens.Replace(tokens)
	return nil
}
