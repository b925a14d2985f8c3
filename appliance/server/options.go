package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"time"
	"unicode/utf8"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// Defaults of the zero Options.
const (
	DefaultAddr         = "127.0.0.1:7420"
	DefaultHeartbeat    = 10 * time.Second
	DefaultHelloTimeout = 10 * time.Second
	DefaultFrameTimeout = 30 * time.Second
	DefaultWriteTimeout = 10 * time.Second
	// DefaultMaxConnections bounds the client sessions of a server whose
	// Options leave it zero: plenty for a site's devices, few enough that
	// a misbehaving fleet cannot exhaust a small box's memory or file
	// descriptors.
	DefaultMaxConnections = 1024
	// DefaultMaxPreHello and DefaultMaxPreHelloPerSource bound the
	// connections that have not authenticated yet, in all and from one
	// source (an IPv4 address or an IPv6 /64).
	DefaultMaxPreHello          = 256
	DefaultMaxPreHelloPerSource = 64
	// DefaultPressureHelloTimeout is the Hello timeout while more than
	// half of MaxPreHello are waiting.
	DefaultPressureHelloTimeout = time.Second
	// MaxPreHelloLimit bounds MaxPreHello and MaxPreHelloPerSource.
	MaxPreHelloLimit = 1_000_000
	// DefaultDeliveryBudget bounds the deliveries queued to consumers on
	// every connection together; MinDeliveryBudget is the least one may
	// set.
	DefaultDeliveryBudget = 256 << 20
	MinDeliveryBudget     = 64 << 10
	// DefaultSlowConsumerGrace is how long a connection paused by the
	// delivery budget has to catch up before it is closed.
	DefaultSlowConsumerGrace = 5 * time.Second
)

// Options configure a Server. The zero value of every field means its
// default.
type Options struct {
	// Addr is the TCP address ListenAndServe listens on. Default
	// 127.0.0.1:7420.
	Addr string
	// Tokens are the accepted Hello tokens, compared in constant time.
	// Empty: no authentication (any token is accepted).
	Tokens []string
	// TLS, when set, makes every connection TLS from its first byte.
	TLS *tls.Config
	// MaxFrame is the largest frame length the server reads and sends,
	// announced in HelloOK. Default wire.DefaultMaxFrame (16 MiB); from
	// wire.MinFrameLimit (4 KiB) to wire.MaxFrameLimit (1 GiB).
	MaxFrame int
	// Heartbeat is the interval H announced in HelloOK: the server sends a
	// Heartbeat when it has sent nothing for H, and closes a connection
	// silent for 3 × H. Default 10 s; negative turns heartbeats and the
	// silence check off. At least 1 ms, at most 1 hour.
	Heartbeat time.Duration
	// HelloTimeout is how long a new connection has to complete its Hello
	// (and its TLS handshake). Default 10 s.
	HelloTimeout time.Duration
	// MaxPreHello bounds the connections that have not authenticated:
	// accepted, and their Hello not read or refused. When a new
	// connection finds it reached, the oldest waiting connection of the
	// source holding the most is closed to make room (the newcomer is
	// never refused). Default DefaultMaxPreHello (256); at most
	// MaxPreHelloLimit.
	MaxPreHello int
	// MaxPreHelloPerSource bounds them per source (an IPv4 address or an
	// IPv6 /64); past it the source's oldest waiting connection is closed.
	// Default DefaultMaxPreHelloPerSource (64), and never above
	// MaxPreHello.
	MaxPreHelloPerSource int
	// PressureHelloTimeout replaces HelloTimeout, for new connections and
	// those already waiting, while more than half of MaxPreHello are
	// waiting (until a quarter are), so a flood drains. Default 1 s, and
	// never above HelloTimeout.
	PressureHelloTimeout time.Duration
	// FrameTimeout is how long a frame may take to arrive once its first
	// byte has: a guard against peers that trickle bytes. Default 30 s.
	FrameTimeout time.Duration
	// WriteTimeout bounds how long the server waits for a client that does
	// not read: a write that makes no progress for this long, or replies
	// that stay queued past it, close the connection. Default 10 s.
	WriteTimeout time.Duration
	// MaxConnections bounds the sessions (connections past their Hello):
	// one more is refused with an unavailable Error naming the limit
	// (connections waiting for their Hello are bounded by MaxPreHello, so
	// a full server still answers each with that refusal). Default
	// DefaultMaxConnections; negative: no limit.
	MaxConnections int
	// DeliveryBudget bounds the bytes of Deliver frames queued to
	// consumers and not yet written, across every connection. Past it the
	// connection with the most queued is paused (its subscriptions take
	// no new deliveries) until it has written half of that; if it has not
	// within SlowConsumerGrace it is sent Goodbye with the reason and
	// closed (budget.go). Default DefaultDeliveryBudget (256 MiB); at
	// least MinDeliveryBudget; negative: no budget.
	DeliveryBudget int64
	// SlowConsumerGrace is how long a paused connection has to catch up.
	// Default 5 s.
	SlowConsumerGrace time.Duration
	// Logger receives the server's logs. Default slog.Default().
	Logger *slog.Logger
	// Cluster routes what a cluster node does not serve itself. Default
	// nil: a solo server.
	Cluster Cluster
	// ServerName is sent in HelloOK. Default the host name, or "fibril".
	ServerName string
}

// Validate reports every value out of range.
func (o Options) Validate() error {
	var errs []error
	if o.MaxFrame != 0 && (o.MaxFrame < wire.MinFrameLimit || o.MaxFrame > wire.MaxFrameLimit) {
		errs = append(errs, fmt.Errorf("max frame %d out of range [%d, %d]", o.MaxFrame, wire.MinFrameLimit, wire.MaxFrameLimit))
	}
	if o.Heartbeat > 0 && (o.Heartbeat < time.Millisecond || o.Heartbeat > time.Hour) {
		errs = append(errs, fmt.Errorf("heartbeat %v out of range [1ms, 1h] (negative turns it off)", o.Heartbeat))
	}
	for name, n := range map[string]int{"max pre-hello": o.MaxPreHello, "max pre-hello per source": o.MaxPreHelloPerSource} {
		if n < 0 || n > MaxPreHelloLimit {
			errs = append(errs, fmt.Errorf("%s %d out of range [1, %d] (0 for the default)", name, n, MaxPreHelloLimit))
		}
	}
	for name, d := range map[string]time.Duration{
		"hello timeout": o.HelloTimeout, "frame timeout": o.FrameTimeout, "write timeout": o.WriteTimeout,
		"pressure hello timeout": o.PressureHelloTimeout, "slow consumer grace": o.SlowConsumerGrace,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s %v is negative", name, d))
		}
	}
	if o.DeliveryBudget > 0 && o.DeliveryBudget < MinDeliveryBudget {
		errs = append(errs, fmt.Errorf("delivery budget %d below %d bytes (negative turns it off)", o.DeliveryBudget, MinDeliveryBudget))
	}
	for i, t := range o.Tokens {
		if t == "" || len(t) > math.MaxUint16 {
			errs = append(errs, fmt.Errorf("token %d: length %d (want 1 to %d bytes)", i+1, len(t), math.MaxUint16))
		}
	}
	if len(o.ServerName) > 255 || !utf8.ValidString(o.ServerName) {
		errs = append(errs, errors.New("server name must be UTF-8, at most 255 bytes"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("server options: %w", err)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	if o.MaxFrame == 0 {
		o.MaxFrame = wire.DefaultMaxFrame
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.Heartbeat < 0 {
		o.Heartbeat = 0
	}
	if o.HelloTimeout == 0 {
		o.HelloTimeout = DefaultHelloTimeout
	}
	if o.MaxPreHello == 0 {
		o.MaxPreHello = DefaultMaxPreHello
	}
	if o.MaxPreHelloPerSource == 0 {
		o.MaxPreHelloPerSource = DefaultMaxPreHelloPerSource
	}
	o.MaxPreHelloPerSource = min(o.MaxPreHelloPerSource, o.MaxPreHello)
	if o.PressureHelloTimeout == 0 {
		o.PressureHelloTimeout = DefaultPressureHelloTimeout
	}
	o.PressureHelloTimeout = min(o.PressureHelloTimeout, o.HelloTimeout)
	if o.FrameTimeout == 0 {
		o.FrameTimeout = DefaultFrameTimeout
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if o.DeliveryBudget == 0 {
		o.DeliveryBudget = DefaultDeliveryBudget
	}
	if o.DeliveryBudget < 0 {
		o.DeliveryBudget = 0 // off
	}
	if o.SlowConsumerGrace == 0 {
		o.SlowConsumerGrace = DefaultSlowConsumerGrace
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ServerName == "" {
		o.ServerName = "fibril"
		if h, err := os.Hostname(); err == nil && h != "" && len(h) <= 255 && utf8.ValidString(h) {
			o.ServerName = h
		}
	}
	return o
}
