package appliance

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
	"github.com/fibril-edge/fibril/wal"
)

// Durability is a queue's mode, fixed by its first declare. It is the
// wire protocol's type: one type from the client through the broker to
// the cluster's control log, so no layer converts it by number.
type Durability = wire.Durability

const (
	// DurabilityUnspecified in a declare keeps the queue's mode, or picks
	// durable for a new queue.
	DurabilityUnspecified = wire.DurabilityUnspecified
	// Durable queues confirm and deliver after the record is synced.
	Durable = wire.DurabilityDurable
	// Buffered queues confirm and deliver once the record is written to the
	// operating system, and sync it in the background soon after.
	Buffered = wire.DurabilityBuffered
)

// appendBoundary is where a queue's appends complete in its log: written
// for a buffered queue, durable otherwise.
func appendBoundary(d Durability) wal.Boundary {
	if d == Buffered {
		return wal.AfterFlush
	}
	return wal.AfterFsync
}

// durabilityOf is the mode whose appends complete at boundary b.
func durabilityOf(b wal.Boundary) Durability {
	if b == wal.AfterFlush {
		return Buffered
	}
	return Durable
}

// ParseDurability reads "durable", "buffered" or "" (unspecified).
func ParseDurability(s string) (Durability, error) {
	switch s {
	case "durable":
		return Durable, nil
	case "buffered":
		return Buffered, nil
	case "":
		return DurabilityUnspecified, nil
	}
	return 0, fmt.Errorf("%w: durability %q (want durable or buffered)", ErrInvalid, s)
}

// BufferedWarning goes with every declare reply and queue view of a
// buffered queue.
const BufferedWarning = "Buffered queues confirm and deliver without waiting for fsync. " +
	"Confirmed messages can be lost after a power loss or storage failure. " +
	"Background sync usually shortens that window, but slow I/O or failures can extend it."

// Overflow says what a full queue does with a new publish.
type Overflow uint8

const (
	OverflowDefault    Overflow = 0 // reject
	OverflowReject     Overflow = 1 // refuse the publish with ErrQueueFull
	OverflowDropOldest Overflow = 2 // discard the oldest ready messages to make room
)

func (o Overflow) String() string {
	switch o {
	case OverflowDefault, OverflowReject:
		return "reject"
	case OverflowDropOldest:
		return "drop-oldest"
	}
	return fmt.Sprintf("overflow(%d)", uint8(o))
}

// ParseOverflow reads "reject", "drop-oldest" or "".
func ParseOverflow(s string) (Overflow, error) {
	switch s {
	case "", "reject":
		return OverflowReject, nil
	case "drop-oldest":
		return OverflowDropOldest, nil
	}
	return 0, fmt.Errorf("%w: overflow %q (want reject or drop-oldest)", ErrInvalid, s)
}

// Limits on declarations.
const (
	MaxPartitions       = 256
	DefaultAckDeadline  = 30 * time.Second
	MaxAckDeadline      = 12 * time.Hour
	MaxDedupeWindow     = 7 * 24 * time.Hour
	DefaultMaxDelivery  = 0 // unlimited
	maxQueueNameLength  = 200
	defaultPartitionCnt = 1
)

var queueNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// QueueConfig is a declaration. Zero fields take their defaults on the
// first declare and keep the stored value on a later one.
//
// It is stored as JSON in the metadata store ("q/<queue>") and in the
// cluster's control log, so its tags are a persisted format: a field may
// be added (old records decode it as zero) but never renamed or retagged,
// and testdata/golden/queue-config.json must keep decoding. Durations are
// nanoseconds; Durability and Overflow their numbers.
type QueueConfig struct {
	Name          string        `json:"Name"`
	Durability    Durability    `json:"Durability"`
	Partitions    int           `json:"Partitions"`
	DeadLetter    string        `json:"DeadLetter"`    // queue that receives discarded and over-delivered messages
	MaxDeliveries int           `json:"MaxDeliveries"` // 0: unlimited
	AckDeadline   time.Duration `json:"AckDeadline"`   // 0: 30 s
	MaxBytes      int64         `json:"MaxBytes"`      // 0: unlimited; counts each message's body, headers, id and key
	MaxMessages   int64         `json:"MaxMessages"`   // 0: unlimited
	Overflow      Overflow      `json:"Overflow"`
	DedupeWindow  time.Duration `json:"DedupeWindow"` // 0: no dedupe
	// DedupeMaxEntries and DedupeMaxBytes bound the ids the queue, all
	// partitions together, remembers for the dedupe window (bytes: each id's length plus
	// DedupeEntryCost). Past either, the oldest ids are forgotten early and
	// counted; dedupe then holds only for the newest that fit. 0: the
	// defaults, DefaultDedupeMaxEntries and DefaultDedupeMaxBytes.
	DedupeMaxEntries int64 `json:"DedupeMaxEntries,omitempty"`
	DedupeMaxBytes   int64 `json:"DedupeMaxBytes,omitempty"`
}

// ValidateName reports whether name can be a queue name.
func ValidateName(name string) error {
	if len(name) == 0 || len(name) > maxQueueNameLength || !queueNameRE.MatchString(name) {
		return fmt.Errorf("%w: queue name %q (1-%d characters: letters, digits, '.', '_', '-', starting with a letter or digit)",
			ErrInvalid, name, maxQueueNameLength)
	}
	return nil
}

// Validate checks a declaration's values.
func (c QueueConfig) Validate() error {
	if err := ValidateName(c.Name); err != nil {
		return err
	}
	var errs []error
	if c.Durability > Buffered {
		errs = append(errs, fmt.Errorf("durability %d", c.Durability))
	}
	if c.Partitions < 0 || c.Partitions > MaxPartitions {
		errs = append(errs, fmt.Errorf("partitions %d (1-%d)", c.Partitions, MaxPartitions))
	}
	if c.DeadLetter != "" {
		if err := ValidateName(c.DeadLetter); err != nil {
			errs = append(errs, fmt.Errorf("dead-letter queue: %w", err))
		} else if c.DeadLetter == c.Name {
			errs = append(errs, errors.New("a queue cannot be its own dead-letter queue"))
		}
	}
	if c.MaxDeliveries < 0 {
		errs = append(errs, fmt.Errorf("max deliveries %d", c.MaxDeliveries))
	}
	if c.AckDeadline < 0 || c.AckDeadline > MaxAckDeadline || (c.AckDeadline > 0 && c.AckDeadline < time.Millisecond) {
		errs = append(errs, fmt.Errorf("ack deadline %v (1ms-%v)", c.AckDeadline, MaxAckDeadline))
	}
	if c.MaxBytes < 0 || c.MaxMessages < 0 {
		errs = append(errs, fmt.Errorf("negative limit"))
	}
	if c.Overflow > OverflowDropOldest {
		errs = append(errs, fmt.Errorf("overflow %d", c.Overflow))
	}
	if c.DedupeWindow < 0 || c.DedupeWindow > MaxDedupeWindow {
		errs = append(errs, fmt.Errorf("dedupe window %v (0-%v)", c.DedupeWindow, MaxDedupeWindow))
	}
	if c.DedupeMaxEntries < 0 || c.DedupeMaxEntries > MaxDedupeEntries {
		errs = append(errs, fmt.Errorf("dedupe max entries %d (1-%d, or 0 for %d)", c.DedupeMaxEntries, MaxDedupeEntries, DefaultDedupeMaxEntries))
	}
	if c.DedupeMaxBytes != 0 && (c.DedupeMaxBytes < MinDedupeMaxBytes || c.DedupeMaxBytes > MaxDedupeMaxBytes) {
		errs = append(errs, fmt.Errorf("dedupe max bytes %d (%d-%d, or 0 for %d)", c.DedupeMaxBytes, MinDedupeMaxBytes, MaxDedupeMaxBytes, DefaultDedupeMaxBytes))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: queue %s: %w", ErrInvalid, c.Name, err)
	}
	return nil
}

// Merge applies a re-declare to the stored declaration: the mode must not
// change, and zero fields keep what is stored.
func (stored QueueConfig) Merge(c QueueConfig) (QueueConfig, error) {
	if c.Durability != DurabilityUnspecified && c.Durability != stored.Durability {
		return stored, fmt.Errorf("%w: queue %s is %s; a declare cannot make it %s (declare a new queue to switch)",
			ErrModeConflict, stored.Name, stored.Durability, c.Durability)
	}
	if c.Partitions != 0 && c.Partitions != stored.Partitions {
		return stored, fmt.Errorf("%w: queue %s has %d partitions, not %d",
			ErrConflict, stored.Name, stored.Partitions, c.Partitions)
	}
	out := stored
	if c.DeadLetter != "" {
		out.DeadLetter = c.DeadLetter
	}
	if c.MaxDeliveries != 0 {
		out.MaxDeliveries = c.MaxDeliveries
	}
	if c.AckDeadline != 0 {
		out.AckDeadline = c.AckDeadline
	}
	if c.MaxBytes != 0 {
		out.MaxBytes = c.MaxBytes
	}
	if c.MaxMessages != 0 {
		out.MaxMessages = c.MaxMessages
	}
	if c.Overflow != OverflowDefault {
		out.Overflow = c.Overflow
	}
	if c.DedupeWindow != 0 {
		out.DedupeWindow = c.DedupeWindow
	}
	if c.DedupeMaxEntries != 0 {
		out.DedupeMaxEntries = c.DedupeMaxEntries
	}
	if c.DedupeMaxBytes != 0 {
		out.DedupeMaxBytes = c.DedupeMaxBytes
	}
	return out, nil
}

// hasLimits reports whether the queue bounds its messages or bytes.
func (c *QueueConfig) hasLimits() bool { return c.MaxMessages > 0 || c.MaxBytes > 0 }

// WithDefaults fills a new queue's zero fields.
func (c QueueConfig) WithDefaults() QueueConfig {
	if c.Durability == DurabilityUnspecified {
		c.Durability = Durable
	}
	if c.Partitions == 0 {
		c.Partitions = defaultPartitionCnt
	}
	if c.AckDeadline == 0 {
		c.AckDeadline = DefaultAckDeadline
	}
	if c.Overflow == OverflowDefault {
		c.Overflow = OverflowReject
	}
	return c
}
