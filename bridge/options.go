package bridge

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// Defaults of Options.
const (
	DefaultReconnectWait    = 500 * time.Millisecond
	DefaultMaxReconnectWait = 10 * time.Second
	DefaultAckWait          = 30 * time.Second
	DefaultFetchBatch       = 256
	DefaultRetryBackoff     = 50 * time.Millisecond
	DefaultMaxRetryBackoff  = 2 * time.Second
	DefaultDrainTimeout     = 5 * time.Second
	DefaultPrefetch         = 64
	DefaultExtendEvery      = 10 * time.Second // a third of a queue's default ack deadline
	MinExtendEvery          = 10 * time.Millisecond
)

// ErrInvalid: a bad option. Validate wraps it with the reason.
var ErrInvalid = errors.New("bridge: invalid options")

// Mode says how an ingest reads NATS.
type Mode string

const (
	// Core subscribes to subjects: at most once on the NATS side.
	Core Mode = "core"
	// JetStream reads a stream through a durable pull consumer and acks
	// each message only after Fibril confirmed it.
	JetStream Mode = "jetstream"
)

// Options configure one bridge: one NATS connection, one Fibril client,
// any number of ingests and egresses. The zero value of every field but
// URLs, FibrilAddr and at least one Ingest or Egress means its default.
type Options struct {
	// Name tells bridges apart in logs and Stats. Default "nats".
	Name string
	// URLs of the NATS servers (nats://host:4222, tls://…). Required.
	URLs []string

	// Credentials, passed to nats.go as they are. CredsFile is a .creds
	// file (JWT and NKey seed, nats.UserCredentials); NKeySeedFile an NKey
	// seed file (nats.NkeyOptionFromSeed); User/Password and Token the
	// plain forms.
	CredsFile    string
	NKeySeedFile string
	User         string
	Password     string
	Token        string
	// TLS: a client certificate and key, CA files, or a whole tls.Config.
	TLSCertFile string
	TLSKeyFile  string
	TLSCAFiles  []string
	TLS         *tls.Config
	// NATSOptions are appended last to the nats.go options, for anything
	// not covered here.
	NATSOptions []nats.Option

	// ReconnectWait is the first wait between reconnect attempts to NATS,
	// doubled per failed attempt up to MaxReconnectWait (with jitter).
	// Defaults 500 ms and 10 s. The bridge retries forever.
	ReconnectWait    time.Duration
	MaxReconnectWait time.Duration

	// FibrilAddr is the broker's client address (host:port, usually the
	// local fibrild on 127.0.0.1:7420). Required. FibrilToken authenticates.
	FibrilAddr  string
	FibrilToken string
	// FibrilTLS, when set, makes the Fibril connection TLS.
	FibrilTLS *tls.Config

	Ingest []Ingest
	Egress []Egress

	// RetryBackoff and MaxRetryBackoff bound the waits of a JetStream
	// ingest retrying a publish the queue refused (full), of core ingest
	// retrying a lost Fibril connection, and of an egress sending a
	// delivery NATS did not answer for again. Defaults 50 ms and 2 s.
	RetryBackoff    time.Duration
	MaxRetryBackoff time.Duration

	// DrainTimeout bounds the drain of a core ingest when Run's context
	// ends: the subscription takes no more messages, and those NATS
	// already delivered to it are still published to Fibril (retried as
	// usual while the broker does not answer) for up to DrainTimeout.
	// What is left then is dropped and counted as "shutdown". Default 5 s.
	DrainTimeout time.Duration

	// QueueExists, when set, reports whether the broker has a queue (a
	// bridge running beside the broker passes the broker's own answer).
	// With it, a fixed ingest queue that does not exist is reported when
	// Run starts (MissingQueues, an error in the log), before any message
	// needs it, and Stats stops listing a missing queue once it exists.
	// Default nil: the bridge learns that a queue is missing from the
	// broker's answer to a publish or a subscription.
	QueueExists func(queue string) bool

	// Logger receives the bridge's logs. Default slog.Default().
	Logger *slog.Logger
}

// Ingest moves NATS messages into Fibril queues.
type Ingest struct {
	// Subject is the NATS subject to read; '*' and '>' wildcards allowed.
	// For JetStream it filters the consumer (empty: the whole stream).
	Subject string
	// Queue names the target queue, either fixed ("events") or a template
	// whose {N} stands for the token the subject's Nth wildcard matched
	// ("sensors.*.temp" with "temp-{1}": sensors.k7.temp goes to temp-k7).
	// With '>' the placeholder stands for the rest of the subject.
	Queue string
	// QueueGroup, for core ingest, subscribes in a NATS queue group so
	// several bridges share the subject's messages.
	QueueGroup string
	// Mode is Core (the default) or JetStream.
	Mode Mode
	// Stream and Durable name the JetStream stream and the durable pull
	// consumer the bridge creates or updates on it. Required for
	// JetStream; Durable defaults to "fibril-bridge".
	Stream  string
	Durable string
	// AckWait is the consumer's ack wait: how long JetStream waits for an
	// ack before it redelivers. Default 30 s. The bridge extends it
	// (InProgress) while it waits for a full queue.
	AckWait time.Duration
	// FetchBatch is the most messages one pull asks for. Default 256.
	FetchBatch int

	tmpl template
}

// Egress moves a Fibril queue's messages to NATS.
type Egress struct {
	// Queue is the Fibril queue to consume. Required.
	Queue string
	// Subject is where its messages go. Required, no wildcards.
	Subject string
	// JetStream publishes with a JetStream publish and waits for the
	// stream's ack (the subject must be bound to a stream); otherwise a
	// core publish acknowledged by a flush round trip to the server.
	JetStream bool
	// Prefetch bounds the Fibril deliveries in flight. Default 64.
	Prefetch int
	// ExtendEvery is how often the egress extends the leases of the
	// deliveries it holds (InProgress), so that a NATS outage longer than
	// the queue's AckDeadline does not count as deliveries. Keep it well
	// below the queue's AckDeadline; a third of it is safe. Default 10 s,
	// a third of the default ack deadline.
	ExtendEvery time.Duration
}

func (o *Options) withDefaults() {
	if o.Name == "" {
		o.Name = "nats"
	}
	if o.ReconnectWait <= 0 {
		o.ReconnectWait = DefaultReconnectWait
	}
	if o.MaxReconnectWait <= 0 {
		o.MaxReconnectWait = DefaultMaxReconnectWait
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = DefaultRetryBackoff
	}
	if o.MaxRetryBackoff <= 0 {
		o.MaxRetryBackoff = DefaultMaxRetryBackoff
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	for i := range o.Ingest {
		in := &o.Ingest[i]
		if in.Mode == "" {
			in.Mode = Core
		}
		if in.Mode == JetStream && in.Durable == "" {
			in.Durable = "fibril-bridge"
		}
		if in.AckWait <= 0 {
			in.AckWait = DefaultAckWait
		}
		if in.FetchBatch <= 0 {
			in.FetchBatch = DefaultFetchBatch
		}
	}
	for i := range o.Egress {
		eg := &o.Egress[i]
		if eg.Prefetch <= 0 {
			eg.Prefetch = DefaultPrefetch
		}
		if eg.ExtendEvery <= 0 {
			eg.ExtendEvery = DefaultExtendEvery
		}
	}
}

// Validate checks the options and says what is wrong, naming the ingest or
// egress by its position. Every error matches ErrInvalid.
func (o Options) Validate() error {
	_, err := o.compile()
	return err
}

// compile validates o and returns it with defaults filled and templates
// parsed.
func (o Options) compile() (Options, error) {
	bad := func(format string, args ...any) (Options, error) {
		return Options{}, fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	o.Ingest = append([]Ingest(nil), o.Ingest...)
	o.Egress = append([]Egress(nil), o.Egress...)
	if o.DrainTimeout < 0 {
		return bad("bridge %s: drain timeout %v is negative (0: the default, %v)", o.Name, o.DrainTimeout, DefaultDrainTimeout)
	}
	for i, eg := range o.Egress {
		if eg.ExtendEvery < 0 {
			return bad("bridge %s: egress %d (%s): extend_every %v is negative (0: the default, %v)", o.Name, i+1, eg.Queue, eg.ExtendEvery, DefaultExtendEvery)
		}
	}
	o.withDefaults()
	if len(o.URLs) == 0 {
		return bad("bridge %s: no NATS URL", o.Name)
	}
	for _, u := range o.URLs {
		if u == "" {
			return bad("bridge %s: empty NATS URL", o.Name)
		}
	}
	if o.FibrilAddr == "" {
		return bad("bridge %s: no Fibril address", o.Name)
	}
	if len(o.Ingest) == 0 && len(o.Egress) == 0 {
		return bad("bridge %s: neither ingest nor egress", o.Name)
	}
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		return bad("bridge %s: TLS certificate and key go together", o.Name)
	}
	if o.CredsFile != "" && o.NKeySeedFile != "" {
		return bad("bridge %s: a creds file and an NKey seed file exclude each other", o.Name)
	}
	if o.MaxReconnectWait < o.ReconnectWait {
		return bad("bridge %s: max reconnect wait %v below reconnect wait %v", o.Name, o.MaxReconnectWait, o.ReconnectWait)
	}
	consumers := map[[2]string]int{}
	for i := range o.Ingest {
		in := &o.Ingest[i]
		if in.Mode == JetStream {
			k := [2]string{in.Stream, in.Durable}
			if j, dup := consumers[k]; dup {
				return bad("bridge %s: ingests %d and %d share durable %q on stream %s; give each its own Durable", o.Name, j+1, i+1, in.Durable, in.Stream)
			}
			consumers[k] = i
		}
		where := fmt.Sprintf("bridge %s: ingest %d (%s)", o.Name, i+1, in.Subject)
		switch in.Mode {
		case Core:
			if in.Subject == "" {
				return bad("%s: no subject", where)
			}
			if in.Stream != "" {
				return bad("%s: a stream needs mode %q", where, JetStream)
			}
		case JetStream:
			if in.Stream == "" {
				return bad("%s: mode jetstream needs a stream", where)
			}
			if in.QueueGroup != "" {
				return bad("%s: a queue group is for core ingest; JetStream shares a durable consumer instead", where)
			}
		default:
			return bad("%s: mode %q is neither %q nor %q", where, in.Mode, Core, JetStream)
		}
		wild := 0
		if in.Subject != "" {
			if err := validSubject(in.Subject, true); err != nil {
				return bad("%s: %v", where, err)
			}
			wild = wildcardCount(in.Subject)
		}
		t, err := parseTemplate(in.Queue, wild)
		if err != nil {
			return bad("%s: %v", where, err)
		}
		in.tmpl = t
	}
	for i, eg := range o.Egress {
		where := fmt.Sprintf("bridge %s: egress %d (%s)", o.Name, i+1, eg.Queue)
		if eg.Queue == "" {
			return bad("%s: no queue", where)
		}
		if err := validSubject(eg.Subject, false); err != nil {
			return bad("%s: %v", where, err)
		}
		if eg.ExtendEvery != 0 && (eg.ExtendEvery < MinExtendEvery || eg.ExtendEvery > time.Hour) {
			return bad("%s: extend_every %v is out of range (%v to 1h; keep it well below the queue's ack deadline)", where, eg.ExtendEvery, MinExtendEvery)
		}
	}
	return o, nil
}
