package uplink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
)

// Defaults of Options.
const (
	DefaultWindow       = 1024
	DefaultDedupeWindow = 24 * time.Hour
	DefaultRescan       = 2 * time.Second
	DefaultMinBackoff   = 100 * time.Millisecond
	DefaultMaxBackoff   = 10 * time.Second
	DefaultExtendEvery  = 10 * time.Second // a third of the default ack deadline
	// MaxDedupeWindow is the longest dedupe window a broker accepts.
	MaxDedupeWindow = 7 * 24 * time.Hour
)

// QueuePlaceholder in Options.RemoteQueue stands for the local queue's name.
const QueuePlaceholder = "{queue}"

// LocalQueue is what the uplink needs to know of a local queue.
type LocalQueue struct {
	Durability client.Durability
	Messages   int64 // unsettled: the backlog still to forward, in flight included
	Bytes      int64 // what those messages store
	// AckDeadline is the queue's lease on a delivery (0: not known); the
	// uplink extends the leases of what it holds well within it.
	AckDeadline time.Duration
}

// Options configure an Uplink. Zero values mean the documented default.
type Options struct {
	// Name names the uplink in logs, status and metrics. Required.
	Name string
	// Queues are the local queues forwarded: names, or patterns in
	// path.Match syntax ("alarms-*"). Patterns need ListQueues. Required.
	Queues []string
	// To are the remote broker's addresses (host:port), any nodes of a
	// cluster; the uplink tries them in turn. Required.
	To []string
	// RemoteQueue names the remote queue; "{queue}" in it stands for the
	// local queue's name. Default "{queue}": the local name.
	RemoteQueue string
	// Token and TLS are how the uplink authenticates to the remote broker
	// and encrypts the link. Default: no token, plain TCP.
	Token string
	TLS   *tls.Config
	// Window is the most publishes of one queue in flight to the remote
	// broker, and the most messages of it the uplink holds (each queue
	// forwarded has a window of its own). Default DefaultWindow.
	Window int
	// Rate limits the messages forwarded per second, all queues together.
	// Default 0: no limit.
	Rate float64
	// DedupeWindow is the dedupe window the uplink declares on each remote
	// queue (1 s to MaxDedupeWindow). A resend is dropped as a duplicate
	// only within it. Default DefaultDedupeWindow.
	DedupeWindow time.Duration
	// Source names this node in the stable id of every forwarded message.
	// It must differ between edges forwarding into one remote queue.
	// Required.
	Source string
	// Local dials the local broker. Required.
	Local func(ctx context.Context) (*client.Client, error)
	// ListQueues lists the local queues, for Queues patterns; rescanned
	// every Rescan. Default nil: only plain names are forwarded.
	ListQueues func() []string
	// Info reports a local queue's mode and backlog, or false when it does
	// not exist. Default nil: the mode is learned with a declare that
	// names no setting (which creates a missing queue, as durable), and no
	// backlog is reported.
	Info func(queue string) (LocalQueue, bool)
	// Rescan is how often patterns and missing queues are looked for
	// again. Default DefaultRescan.
	Rescan time.Duration
	// MinBackoff and MaxBackoff bound the wait after a failure before the
	// next attempt; it doubles from MinBackoff, jittered. Defaults
	// DefaultMinBackoff and DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// ExtendEvery is how often the leases of the messages the uplink
	// holds are extended, so that an outage longer than the local queue's
	// MaxDeliveries times its AckDeadline does not discard them (each
	// lapsed lease counts as a delivery). A third of the queue's
	// AckDeadline when Info gives it and that is sooner. Default
	// DefaultExtendEvery.
	ExtendEvery time.Duration
	// Logger receives the uplink's events. Default slog.Default().
	Logger *slog.Logger
}

// ErrInvalid marks options the uplink refuses.
var ErrInvalid = errors.New("uplink: invalid options")

// Validate reports every value out of range.
func (o Options) Validate() error {
	var errs []string
	if o.Name == "" {
		errs = append(errs, "a name is required")
	}
	if len(o.Queues) == 0 {
		errs = append(errs, "no queues to forward")
	}
	for _, q := range o.Queues {
		if _, err := path.Match(q, ""); err != nil || q == "" {
			errs = append(errs, fmt.Sprintf("queue pattern %q is not valid", q))
		}
	}
	if len(o.To) == 0 {
		errs = append(errs, "no remote addresses (to)")
	}
	for _, a := range o.To {
		if a == "" || strings.Contains(a, ",") {
			errs = append(errs, fmt.Sprintf("remote address %q (want host:port)", a))
		}
	}
	if o.RemoteQueue != "" && strings.Count(o.RemoteQueue, QueuePlaceholder) == 0 && o.hasPattern() {
		errs = append(errs, fmt.Sprintf("remote_queue %q names one queue for a pattern of local queues: add %s", o.RemoteQueue, QueuePlaceholder))
	}
	if o.Window < 0 || o.Window > 1<<20 {
		errs = append(errs, fmt.Sprintf("window %d (1 to %d)", o.Window, 1<<20))
	}
	if o.Rate < 0 {
		errs = append(errs, fmt.Sprintf("rate %v (0 or more messages per second)", o.Rate))
	}
	if o.DedupeWindow != 0 && (o.DedupeWindow < time.Second || o.DedupeWindow > MaxDedupeWindow) {
		errs = append(errs, fmt.Sprintf("dedupe window %v (1s to %v)", o.DedupeWindow, MaxDedupeWindow))
	}
	if o.Source == "" {
		errs = append(errs, "a source node name is required")
	}
	if o.Local == nil {
		errs = append(errs, "no way to reach the local broker")
	}
	if o.MinBackoff < 0 || o.MaxBackoff < 0 || (o.MaxBackoff != 0 && o.MinBackoff > o.MaxBackoff) {
		errs = append(errs, "backoff bounds out of order")
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w %q: %s", ErrInvalid, o.Name, strings.Join(errs, "; "))
	}
	return nil
}

func (o Options) hasPattern() bool {
	for _, q := range o.Queues {
		if strings.ContainsAny(q, `*?[\`) {
			return true
		}
	}
	return false
}

func (o Options) withDefaults() Options {
	if o.RemoteQueue == "" {
		o.RemoteQueue = QueuePlaceholder
	}
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	if o.DedupeWindow == 0 {
		o.DedupeWindow = DefaultDedupeWindow
	}
	if o.Rescan <= 0 {
		o.Rescan = DefaultRescan
	}
	if o.MinBackoff == 0 {
		o.MinBackoff = DefaultMinBackoff
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = max(DefaultMaxBackoff, o.MinBackoff)
	}
	if o.ExtendEvery <= 0 {
		o.ExtendEvery = DefaultExtendEvery
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// remoteName is the remote queue for local queue q.
func (o Options) remoteName(q string) string {
	return strings.ReplaceAll(o.RemoteQueue, QueuePlaceholder, q)
}
