package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// connect opens one connection: transport, TLS if configured, Hello and
// HelloOK, all within DialTimeout and ctx. It does not start the
// connection's goroutines.
func (c *Client) connect(ctx context.Context) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.DialTimeout)
	defer cancel()
	nc, err := c.opts.Dialer(ctx, "tcp", c.addr)
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", c.addr, err)
	}
	cn, err := c.handshake(ctx, nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return cn, nil
}

func (c *Client) handshake(ctx context.Context, nc net.Conn) (*conn, error) {
	// Any blocking read or write below returns once ctx is done (its
	// deadline included: connect gave it DialTimeout).
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Now()) })
	defer stop()

	if c.opts.TLS != nil {
		cfg := c.opts.TLS.Clone()
		if cfg.ServerName == "" {
			if host, _, err := net.SplitHostPort(c.addr); err == nil {
				cfg.ServerName = host
			}
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("client: TLS handshake with %s: %w", c.addr, err)
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
		return nil, fmt.Errorf("client: hello to %s: %w", c.addr, ctxErr(ctx, err))
	}
	f, err := r.ReadFrame()
	if err != nil {
		return nil, fmt.Errorf("client: hello from %s: %w", c.addr, ctxErr(ctx, err))
	}
	var ok *wire.HelloOK
	switch f := f.(type) {
	case *wire.HelloOK:
		ok = f
	case *wire.Error:
		return nil, fmt.Errorf("client: hello to %s: %w", c.addr, remoteError(f))
	default:
		return nil, fmt.Errorf("client: hello to %s: unexpected %s frame", c.addr, f.Type())
	}
	if ok.Version != wire.Version {
		w.WriteFrame(&wire.Goodbye{Reason: fmt.Sprintf("client speaks version %d only", wire.Version)})
		w.Flush()
		return nil, fmt.Errorf("client: hello to %s: %w", c.addr, &Error{Code: wire.CodeUnsupportedVersion,
			Message: fmt.Sprintf("broker chose version %d; this client speaks %d", ok.Version, wire.Version)})
	}
	if ok.MaxFrame != 0 {
		r.SetMaxFrame(int(ok.MaxFrame))
		w.SetMaxFrame(int(ok.MaxFrame))
	}
	if !stop() {
		return nil, fmt.Errorf("client: hello to %s: %w", c.addr, ctx.Err())
	}
	nc.SetDeadline(time.Time{})
	return newConn(c, nc, r, w, ok), nil
}

// ctxErr prefers ctx's error to the I/O error a cancelled ctx caused.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}
