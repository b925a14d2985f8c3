package client

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// backoff is the wait before reconnect attempt n (from 0): initial
// doubled n times, capped at maxWait, jittered into its upper half so
// that clients cut off together do not return together.
func backoff(n int, initial, maxWait time.Duration) time.Duration {
	d := maxWait
	if n < 32 && initial<<n > 0 && initial<<n < maxWait {
		d = initial << n
	}
	return d/2 + rand.N(d/2+1)
}

// supervise owns reconnection: it waits for the current connection to
// end, then dials again and re-establishes subscriptions, until Close
// (or, with DisableReconnect, until the first loss). It dials in rounds:
// one backoff wait, then every address once, from the one after the
// address last connected to and round the list, with no wait between
// them, so a dead node in the list costs one dial, not a backoff.
func (c *Client) supervise(cn *conn) {
	defer c.wg.Done()
	defer func() { // on Close: the connection held, if Close did not end it
		if cn != nil {
			cn.fail(ErrClosed)
			cn.wait()
		}
	}()
	round, attempt := 0, 0
	for {
		select {
		case <-cn.done:
		case <-c.life.Done():
			return
		}
		cn.wait()
		cause := cn.cause()
		c.lost(cn)
		if c.life.Err() != nil || c.isClosed() { // Close ended it: nothing was lost
			return
		}
		if c.opts.DisableReconnect {
			c.log.Warn("fibril: connection lost; reconnect is disabled", "addr", cn.addr, "err", cause)
			c.setFailed(lostError(cause, false))
			return
		}
		c.log.Warn("fibril: connection lost; reconnecting", "addr", cn.addr, "server", cn.server, "session", cn.session, "err", cause)
		cn = nil
		for ; cn == nil; round++ {
			wait := backoff(round, c.opts.InitialBackoff, c.opts.MaxBackoff)
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-c.life.Done():
				t.Stop()
				return
			}
			next := c.dialRound(&attempt)
			if next == nil {
				if c.life.Err() != nil {
					return
				}
				continue
			}
			if !c.install(next) {
				return
			}
			cn = next
		}
		c.log.Info("fibril: reconnected", "addr", cn.addr, "server", cn.server, "session", cn.session, "attempts", attempt)
		// A session was established: the next loss starts from the
		// initial backoff, so a server back after a short restart is
		// reached again within InitialBackoff, not after the waits its
		// restart ran up.
		round, attempt = 0, 0
	}
}

// dialRound tries every address once, from c.next round the list, and
// returns the first connection made, with c.next moved to the address
// after it; nil if none connects or Close stops the round. attempt counts
// the dials since the loss, for the log.
func (c *Client) dialRound(attempt *int) *conn {
	for i := range c.addrs {
		addr := c.addrs[(c.next+i)%len(c.addrs)]
		*attempt++
		cn, err := c.connect(c.life, addr)
		if err == nil {
			c.next = (c.next + i + 1) % len(c.addrs)
			return cn
		}
		if c.life.Err() != nil {
			return nil
		}
		c.log.Log(context.Background(), slogLevelFor(err), "fibril: reconnect failed", "addr", addr, "attempt", *attempt, "err", err)
	}
	return nil
}

// install makes cn the current connection, starts it, and re-establishes
// every active subscription on it. It reports false (and closes cn) if the
// client is closed.
func (c *Client) install(cn *conn) bool {
	cn.start()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		cn.fail(ErrClosed)
		cn.wait()
		return false
	}
	subs := make([]*Consumer, 0, len(c.subs))
	for _, s := range c.subs {
		subs = append(subs, s)
	}
	c.mu.Unlock()
	for _, s := range subs {
		s.resubscribe(cn)
	}
	c.mu.Lock()
	if !c.closed && !cn.dead.Load() {
		c.cur = cn
		select {
		case <-c.ready:
		default:
			close(c.ready)
		}
	}
	c.mu.Unlock()
	return true
}

// connUnusable takes cn out of service for new requests: callers wait for
// (or, without waiting, are told there is no) connection.
func (c *Client) connUnusable(cn *conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == cn {
		c.cur = nil
		c.ready = make(chan struct{})
	}
}

// lost tells every subscription that cn has ended: deliveries it had not
// handed out are dropped (the broker redelivers them), and settles of the
// ones handed out become local no-ops.
func (c *Client) lost(cn *conn) {
	c.connUnusable(cn)
	c.mu.Lock()
	subs := make([]*Consumer, 0, len(c.subs))
	for _, s := range c.subs {
		subs = append(subs, s)
	}
	c.mu.Unlock()
	for _, s := range subs {
		s.connLost(cn)
	}
}

// setFailed makes every later call fail with err and ends every
// Consumer with it (reconnect disabled).
func (c *Client) setFailed(err error) {
	c.mu.Lock()
	c.failed = err
	select {
	case <-c.ready:
	default:
		close(c.ready) // wake the waiters; they find c.failed
	}
	subs := make([]*Consumer, 0, len(c.subs))
	for _, s := range c.subs {
		subs = append(subs, s)
	}
	c.mu.Unlock()
	for _, s := range subs {
		c.wg.Go(func() { s.shutdown(err, false) })
	}
}

// slogLevelFor logs refusals that will not go away by themselves (a wrong
// token, a version mismatch) as errors, the rest as warnings.
func slogLevelFor(err error) slog.Level {
	var e *Error
	if errors.As(err, &e) && (e.Code == wire.CodeUnauthorized || e.Code == wire.CodeUnsupportedVersion) {
		return slog.LevelError
	}
	return slog.LevelWarn
}
