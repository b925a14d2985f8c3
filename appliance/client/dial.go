package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// splitAddrs reads Dial's addr: one host:port, or several separated by
// commas (spaces around each are dropped). An empty list, or an empty
// entry in it, is ErrInvalid.
func splitAddrs(addr string) ([]string, error) {
	if strings.TrimSpace(addr) == "" {
		return nil, fmt.Errorf("%w address: none given", ErrInvalid)
	}
	var addrs []string
	for a := range strings.SplitSeq(addr, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			return nil, fmt.Errorf("%w address list %q: an empty entry", ErrInvalid, addr)
		}
		addrs = append(addrs, a)
	}
	return addrs, nil
}

// dialFirst makes Dial's connection: it tries every address in order,
// each within DialTimeout, until one connects, and stops early when ctx
// ends. c.next is then the address after the one that connected. With one
// address its error is that address's; with several it names each address
// tried with its error.
func (c *Client) dialFirst(ctx context.Context) (*conn, error) {
	var errs []error
	for i, addr := range c.addrs {
		cn, err := c.connect(ctx, addr)
		if err == nil {
			c.next = (i + 1) % len(c.addrs)
			return cn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(c.addrs) == 1 {
		return nil, errs[0]
	}
	return nil, dialError{tried: len(errs), of: len(c.addrs), errs: errs}
}

// dialError is the error of a Dial in which no address of a list
// connected: every attempt's error, each naming its address. errors.Is
// and errors.As look into each of them.
type dialError struct {
	tried, of int
	errs      []error
}

func (e dialError) Error() string {
	var b strings.Builder
	if e.tried < e.of {
		fmt.Fprintf(&b, "client: no broker reached (%d of %d addresses tried): ", e.tried, e.of)
	} else {
		fmt.Fprintf(&b, "client: no broker reached at any of %d addresses: ", e.of)
	}
	for i, err := range e.errs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(strings.TrimPrefix(err.Error(), "client: "))
	}
	return b.String()
}

func (e dialError) Unwrap() []error { return e.errs }

// connect opens one connection to addr: transport, TLS if configured,
// Hello and HelloOK, all within DialTimeout and ctx. It does not start the
// connection's goroutines.
func (c *Client) connect(ctx context.Context, addr string) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.DialTimeout)
	defer cancel()
	nc, err := c.opts.Dialer(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", addr, err)
	}
	cn, err := c.handshake(ctx, addr, nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return cn, nil
}

func (c *Client) handshake(ctx context.Context, addr string, nc net.Conn) (*conn, error) {
	// Any blocking read or write below returns once ctx is done (its
	// deadline included: connect gave it DialTimeout).
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Now()) })
	defer stop()

	if c.opts.TLS != nil {
		cfg := c.opts.TLS.Clone()
		if cfg.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				cfg.ServerName = host
			}
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("client: TLS handshake with %s: %w", addr, err)
		}
		nc = tc
	}

	r := wire.NewReader(nc, wire.Options{})
	w := wire.NewWriter(nc, wire.Options{})
	hello := &wire.Hello{Version: wire.Version, Token: c.opts.Token, ClientName: c.opts.ClientName}
	if err := w.WriteFrame(hello); err != nil {
		return nil, fmt.Errorf("client: hello: %w", err)
	}
	if err := w.Flush(); err != nil {
		return nil, fmt.Errorf("client: hello to %s: %w", addr, ctxErr(ctx, err))
	}
	f, err := r.ReadFrame()
	if err != nil {
		return nil, fmt.Errorf("client: hello from %s: %w", addr, ctxErr(ctx, err))
	}
	var ok *wire.HelloOK
	switch f := f.(type) {
	case *wire.HelloOK:
		ok = f
	case *wire.Error:
		return nil, fmt.Errorf("client: hello to %s: %w", addr, remoteError(f))
	default:
		return nil, fmt.Errorf("client: hello to %s: unexpected %s frame", addr, f.Type())
	}
	if ok.Version < wire.MinVersion || ok.Version > wire.Version {
		w.WriteFrame(&wire.Goodbye{Reason: fmt.Sprintf("client speaks versions %d to %d", wire.MinVersion, wire.Version)})
		w.Flush()
		return nil, fmt.Errorf("client: hello to %s: %w", addr, &Error{Code: wire.CodeUnsupportedVersion,
			Message: fmt.Sprintf("broker chose version %d; this client speaks %d to %d", ok.Version, wire.MinVersion, wire.Version)})
	}
	r.SetVersion(ok.Version)
	w.SetVersion(ok.Version)
	if ok.MaxFrame != 0 {
		r.SetMaxFrame(int(ok.MaxFrame))
		w.SetMaxFrame(int(ok.MaxFrame))
	}
	if !stop() {
		return nil, fmt.Errorf("client: hello to %s: %w", addr, ctx.Err())
	}
	nc.SetDeadline(time.Time{})
	return newConn(c, addr, nc, r, w, ok), nil
}

// ctxErr prefers ctx's error to the I/O error a cancelled ctx caused.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}
