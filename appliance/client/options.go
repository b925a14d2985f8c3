package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"
	"unicode/utf8"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// Defaults of Options and SubscribeOptions.
const (
	DefaultDialTimeout    = 10 * time.Second
	DefaultInitialBackoff = 100 * time.Millisecond
	DefaultMaxBackoff     = 5 * time.Second
	DefaultMaxInFlight    = 1024
	DefaultCloseTimeout   = 5 * time.Second
)

// Options configure a Client. The zero value of every field means its
// default.
type Options struct {
	// Token authenticates the client (Hello.Token). Default "": no token,
	// which a broker with no tokens configured accepts.
	Token string
	// ClientName is shown in the broker's logs and dashboard. Default: the
	// program's name (base of os.Args[0]).
	ClientName string
	// TLS, when set, makes every connection TLS from the first byte. An
	// empty ServerName is filled from the address's host.
	TLS *tls.Config
	// DialTimeout bounds one connection attempt to one address: TCP
	// connect, TLS handshake and the protocol's Hello. With several
	// addresses each gets its own DialTimeout. Default 10 s.
	DialTimeout time.Duration
	// Heartbeat is how long the client lets its side of the connection go
	// silent before it sends a Heartbeat. Default (0): the broker's
	// interval H from HelloOK. A longer value is lowered to H; a shorter one
	// keeps, say, a NAT mapping alive. Whatever this says, the client
	// closes (and reconnects) a connection on which it has received
	// nothing for 3×H, and with H = 0 there are no heartbeats at all.
	Heartbeat time.Duration
	// DisableReconnect turns reconnecting off: after the connection is
	// lost every call fails. Default false: on connection loss the client
	// reconnects with exponential backoff (from InitialBackoff, doubling,
	// capped at MaxBackoff, each wait jittered down by up to half; it starts
	// over from InitialBackoff once a session is established again) and
	// re-establishes every subscription. With several addresses (see Dial)
	// the backoff is per round of the list: after each wait the client
	// tries every address once, starting after the one it lost, with no
	// wait between them.
	DisableReconnect bool
	// InitialBackoff is the first reconnect wait. Default 100 ms.
	InitialBackoff time.Duration
	// MaxBackoff caps the reconnect wait. Default 5 s.
	MaxBackoff time.Duration
	// MaxInFlight bounds publishes awaiting their Confirm; Publish and
	// PublishAsync wait for a slot past it. Default 1024.
	MaxInFlight int
	// CloseTimeout bounds how long Close waits for the broker to answer
	// outstanding requests and end the connection gracefully, and how long
	// Consumer.Close waits for Unsubscribed. Default 5 s.
	CloseTimeout time.Duration
	// Dialer opens the transport connection. Default: a net.Dialer over
	// TCP. TLS, when configured, runs on top of what it returns.
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
	// Logger receives connection events (lost, reconnected, settle errors
	// nobody handles). Default slog.Default().
	Logger *slog.Logger
}

// Validate reports values out of range.
func (o Options) Validate() error {
	var errs []error
	if len(o.Token) > wire.MaxStringLen {
		errs = append(errs, fmt.Errorf("token of %d bytes (at most %d)", len(o.Token), wire.MaxStringLen))
	}
	if len(o.ClientName) > wire.MaxStringLen || !utf8.ValidString(o.ClientName) {
		errs = append(errs, fmt.Errorf("client name must be UTF-8 of at most %d bytes", wire.MaxStringLen))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"DialTimeout", o.DialTimeout}, {"Heartbeat", o.Heartbeat}, {"InitialBackoff", o.InitialBackoff},
		{"MaxBackoff", o.MaxBackoff}, {"CloseTimeout", o.CloseTimeout},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s %v is negative", d.name, d.v))
		}
	}
	if o.InitialBackoff > 0 && o.MaxBackoff > 0 && o.MaxBackoff < o.InitialBackoff {
		errs = append(errs, fmt.Errorf("MaxBackoff %v is below InitialBackoff %v", o.MaxBackoff, o.InitialBackoff))
	}
	if o.MaxInFlight < 0 {
		errs = append(errs, fmt.Errorf("MaxInFlight %d is negative", o.MaxInFlight))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w options: %w", ErrInvalid, err)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.ClientName == "" {
		o.ClientName = filepath.Base(os.Args[0])
		if !utf8.ValidString(o.ClientName) || len(o.ClientName) > 200 {
			o.ClientName = "fibril-go"
		}
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.InitialBackoff == 0 {
		o.InitialBackoff = DefaultInitialBackoff
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = max(DefaultMaxBackoff, o.InitialBackoff)
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.CloseTimeout == 0 {
		o.CloseTimeout = DefaultCloseTimeout
	}
	if o.Dialer == nil {
		var d net.Dialer
		o.Dialer = d.DialContext
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}
