package uplink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/fibril-edge/fibril/appliance/client"
)

// Uplink forwards its local queues to the remote broker. Make one with
// New, start it with Run.
type Uplink struct {
	opts    Options
	log     *slog.Logger
	limiter *rate.Limiter // nil: no rate limit

	mu         sync.Mutex // guards the fields below
	state      State
	lastErr    string
	remote     *client.Client
	forwarders map[string]*forwarder // by local queue
	order      []string              // local queues in the order they were found
}

// New checks opts and makes an Uplink.
func New(opts Options) (*Uplink, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	o := opts.withDefaults()
	u := &Uplink{opts: o, log: o.Logger.With("uplink", o.Name), state: StateConnecting,
		forwarders: make(map[string]*forwarder)}
	if o.Rate > 0 {
		u.limiter = rate.NewLimiter(rate.Limit(o.Rate), max(1, min(o.Window, int(o.Rate/10))))
	}
	return u, nil
}

// Run connects to both brokers and forwards until ctx ends. It returns
// nil then; it never gives up on a failing remote.
func (u *Uplink) Run(ctx context.Context) error {
	local, ok := u.dial(ctx, "local broker", u.opts.Local)
	if !ok {
		return nil
	}
	defer local.Close()
	remote, ok := u.dial(ctx, "remote broker", u.dialRemote)
	if !ok {
		return nil
	}
	defer remote.Close()
	u.mu.Lock()
	u.remote, u.state, u.lastErr = remote, StateConnected, ""
	u.mu.Unlock()
	u.log.Info("uplink connected", "remote", remote.Addr())

	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(u.opts.Rescan)
	defer tick.Stop()
	for {
		for _, q := range u.wanted() {
			u.mu.Lock()
			_, running := u.forwarders[q]
			if !running {
				f := newForwarder(u, q, local, remote)
				u.forwarders[q] = f
				u.order = append(u.order, q)
				wg.Go(func() { f.run(ctx) })
			}
			u.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// dialRemote dials the remote broker, every address of To in turn.
func (u *Uplink) dialRemote(ctx context.Context) (*client.Client, error) {
	return client.Dial(ctx, strings.Join(u.opts.To, ","), client.Options{
		Token: u.opts.Token, TLS: u.opts.TLS, ClientName: "fibril-uplink " + u.opts.Name,
		MaxInFlight: u.opts.Window, Logger: u.log,
		InitialBackoff: u.opts.MinBackoff, MaxBackoff: u.opts.MaxBackoff,
	})
}

// dial calls dial until it succeeds, backing off between attempts; false
// when ctx ended first.
func (u *Uplink) dial(ctx context.Context, what string, dial func(context.Context) (*client.Client, error)) (*client.Client, bool) {
	for attempt := 0; ; attempt++ {
		c, err := dial(ctx)
		if err == nil {
			return c, true
		}
		if ctx.Err() != nil {
			return nil, false
		}
		state, wait := StateBackingOff, u.backoff(attempt)
		if errors.Is(err, client.ErrUnauthorized) {
			state, wait = StateRefused, u.opts.MaxBackoff
		}
		u.setState(state, fmt.Sprintf("%s: %v", what, err))
		if attempt == 0 || state == StateRefused {
			u.log.Warn("uplink cannot reach the "+what+"; retrying", "err", err, "state", state)
		}
		if !sleep(ctx, wait) {
			return nil, false
		}
	}
}

func (u *Uplink) setState(s State, reason string) {
	u.mu.Lock()
	u.state, u.lastErr = s, reason
	u.mu.Unlock()
}

// wanted are the local queues the uplink forwards now: the plain names of
// Queues, and the queues ListQueues has that a pattern matches.
func (u *Uplink) wanted() []string {
	var out []string
	var names []string
	if u.opts.ListQueues != nil {
		names = u.opts.ListQueues()
	}
	for _, q := range u.opts.Queues {
		if !strings.ContainsAny(q, `*?[\`) {
			out = append(out, q)
			continue
		}
		for _, n := range names {
			if ok, _ := path.Match(q, n); ok {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Stats reports the uplink's state and every forwarded queue's.
func (u *Uplink) Stats() Stats {
	u.mu.Lock()
	s := Stats{Name: u.opts.Name, To: slices.Clone(u.opts.To), State: u.state, LastError: u.lastErr, Window: u.opts.Window}
	if u.remote != nil {
		s.Remote = u.remote.Addr()
		if s.Remote == "" && s.State == StateConnected {
			s.State = StateBackingOff
		}
	}
	fs := make([]*forwarder, 0, len(u.order))
	for _, q := range u.order {
		fs = append(fs, u.forwarders[q])
	}
	u.mu.Unlock()
	for _, f := range fs {
		s.Queues = append(s.Queues, f.stats())
	}
	if len(fs) == 0 && s.Remote == "" {
		// Not connected yet (a site booted during an outage): the queues
		// it will forward, and what waits in them, are shown all the same.
		for _, q := range u.wanted() {
			qs := QueueStats{Local: q, Remote: u.opts.remoteName(q), State: s.State, Reason: s.LastError,
				BacklogMessages: -1, BacklogBytes: -1}
			if u.opts.Info != nil {
				if in, ok := u.opts.Info(q); ok {
					qs.BacklogMessages, qs.BacklogBytes = in.Messages, in.Bytes
				}
			}
			s.Queues = append(s.Queues, qs)
		}
	}
	return s
}

// backoff is the wait before attempt (from 0): doubling from MinBackoff up
// to MaxBackoff, jittered down by up to a half.
func (u *Uplink) backoff(attempt int) time.Duration {
	d := u.opts.MinBackoff << min(attempt, 20)
	if d <= 0 || d > u.opts.MaxBackoff {
		d = u.opts.MaxBackoff
	}
	return d/2 + rand.N(d/2+1)
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
