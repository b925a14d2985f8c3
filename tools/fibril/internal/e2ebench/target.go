package e2ebench

import (
	"context"
	"encoding/binary"
	"errors"
	"time"
)

// A Target is one broker in one durability mode.
type Target interface {
	// System names the broker ("fibril", "jetstream").
	System() string
	// Mode names the durability ("durable", "buffered", "always-sync",
	// "default-sync").
	Mode() string
	// Open makes a fresh queue or stream called name, with publishers
	// connections to publish on (each allowing window publishes in flight)
	// and one to consume from.
	Open(ctx context.Context, name string, publishers, window int) (Stream, error)
}

// A Stream is one fresh queue or stream of a Target and its connections.
type Stream interface {
	// Publish sends body on publisher p's connection and returns at once
	// with the pending confirm, waiting only for an in-flight slot. body is
	// not copied and must not change until the confirm.
	Publish(p int, body []byte) (Pending, error)
	// Consume starts the consumer: deliver is called for every delivery,
	// from one goroutine at a time, and the delivery is then acked.
	// received is when the broker took the publish, by its clock (the same
	// as the bench's on one machine), or zero if it does not say; arrived
	// is when the delivery reached the bench, taken before any wait of the
	// bench's own (the lock that makes the calls one at a time).
	Consume(ctx context.Context, deliver func(body []byte, received, arrived time.Time)) error
	// Queues is how many queues the stream spreads its publishes over.
	Queues() int
	// Close ends the connections and removes the queue or stream.
	Close() error
}

// Pending is a publish awaiting its confirm.
type Pending interface {
	// Wait blocks until the broker confirms or refuses the publish, or
	// ctx ends, and returns when the answer reached the bench: a stream
	// whose answers may come out of publish order (several queues) stamps
	// each as it comes, so that a publish waited for after a slower one
	// is not charged that one's wait.
	Wait(ctx context.Context) (arrived time.Time, err error)
}

// An unorderedPending's confirm may come before those of publishes made
// earlier on the same publisher (a stream over several queues): a bench
// that frees a slot per confirm waits for it on its own, not in order.
type unorderedPending interface {
	Pending
	unordered()
}

// warmupFor is how many warm-up messages st needs: o.Warmup, or for a
// stream over several queues at least one per queue from every publisher
// (their publishes go round robin over the queues, each from the first),
// so that no queue's first publish or delivery falls in the measured run.
func warmupFor(st Stream, publishers int, o RunOptions) int {
	if q := st.Queues(); q > 1 {
		return max(o.Warmup, publishers*q)
	}
	return o.Warmup
}

// ErrShortBody is returned by DecodeBody for a body without a header.
var ErrShortBody = errors.New("e2ebench: body shorter than its header")

// bodyHeader is the bytes at the front of every message: the intended
// send time (Unix nanoseconds) and the message's index in its run.
const bodyHeader = 16

// EncodeBody returns a size-byte message carrying intended and index.
func EncodeBody(size int, intended time.Time, index int) []byte {
	b := make([]byte, max(size, bodyHeader))
	binary.LittleEndian.PutUint64(b[0:], uint64(intended.UnixNano()))
	binary.LittleEndian.PutUint64(b[8:], uint64(index))
	// The filler is b[i] = 'a' + i%26: written for one period, then
	// doubled by copies, each a whole number of periods long, so that the
	// load generator's cost per message is a few memmoves, not a loop per
	// byte.
	fill := b[bodyHeader:]
	n := 0
	for ; n < len(fill) && n < 26; n++ {
		fill[n] = byte('a' + (bodyHeader+n)%26)
	}
	for n < len(fill) {
		n += copy(fill[n:], fill[:n])
	}
	return b
}

// DecodeBody reads the intended send time and index from a message.
func DecodeBody(b []byte) (intended time.Time, index int, err error) {
	if len(b) < bodyHeader {
		return time.Time{}, 0, ErrShortBody
	}
	return time.Unix(0, int64(binary.LittleEndian.Uint64(b[0:]))), int(binary.LittleEndian.Uint64(b[8:])), nil
}
