package e2ebench

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// RunOptions configure RunOpenLoop and RunSaturation. Zero values mean
// the defaults given.
type RunOptions struct {
	// Payload is the message size; default 1024.
	Payload int
	// Window bounds publishes in flight per publisher; default 256.
	Window int
	// Grace is how long after the schedule's end every message may take
	// to be confirmed and delivered for the run to count as sustained;
	// default the larger of 500 ms and a tenth of the schedule.
	Grace time.Duration
	// Warmup messages are published and consumed before the measured
	// part, untimed; default 200.
	Warmup int
	// Pids are the broker's processes (a cluster's nodes), measured in
	// /proc around the measured part and summed; none: not measured.
	Pids []int
	// Progress, when set, is called with the messages delivered so far.
	Progress func(delivered int)
}

func (o RunOptions) withDefaults(d time.Duration) RunOptions {
	if o.Payload == 0 {
		o.Payload = 1024
	}
	if o.Window == 0 {
		o.Window = 256
	}
	if o.Grace == 0 {
		o.Grace = max(500*time.Millisecond, d/10)
	}
	if o.Warmup == 0 {
		o.Warmup = 200
	}
	return o
}

// recorder collects what one run observes; all methods are safe for
// concurrent use.
type recorder struct {
	mu         sync.Mutex
	total      int // measured messages; indexes at or above are warm-up
	seen       []bool
	delivered  int
	warm       int
	deliverLat []time.Duration
	// receiveLat is from the intended send time to the broker taking the
	// publish, afterLat from then to the delivery, for the deliveries
	// whose broker says when it took them.
	receiveLat, afterLat []time.Duration
	lastDelivery         time.Time
	progress             func(int)
	allIn                chan struct{} // closed when every measured message arrived
	warmIn               chan struct{} // closed when every warm-up message arrived
	warmWant             int
}

func newRecorder(total, warmup int, progress func(int)) *recorder {
	return &recorder{total: total, seen: make([]bool, total), deliverLat: make([]time.Duration, 0, total),
		progress: progress, allIn: make(chan struct{}), warmIn: make(chan struct{}), warmWant: warmup}
}

// deliver is the consumer's callback.
func (r *recorder) deliver(body []byte, received, now time.Time) {
	intended, idx, err := DecodeBody(body)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if idx >= r.total {
		r.warm++
		if r.warm == r.warmWant {
			close(r.warmIn)
		}
		return
	}
	if r.seen[idx] {
		return // a redelivery
	}
	r.seen[idx] = true
	r.delivered++
	r.deliverLat = append(r.deliverLat, now.Sub(intended))
	if !received.IsZero() {
		r.receiveLat = append(r.receiveLat, received.Sub(intended))
		r.afterLat = append(r.afterLat, now.Sub(received))
	}
	r.lastDelivery = now
	if r.progress != nil && r.delivered%256 == 0 {
		r.progress(r.delivered)
	}
	if r.delivered == r.total {
		close(r.allIn)
	}
}

// warmup publishes o.Warmup messages round robin, waits for their
// confirms and their deliveries.
func warmup(ctx context.Context, st Stream, publishers int, total int, o RunOptions, rec *recorder) error {
	var pend []Pending
	for i := range o.Warmup {
		p, err := st.Publish(i%publishers, EncodeBody(o.Payload, time.Now(), total+i))
		if err != nil {
			return fmt.Errorf("warm-up publish: %w", err)
		}
		pend = append(pend, p)
	}
	for _, p := range pend {
		if _, err := p.Wait(ctx); err != nil {
			return fmt.Errorf("warm-up confirm: %w", err)
		}
	}
	select {
	case <-rec.warmIn:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("warm-up deliveries: %w", ctx.Err())
	}
}

// sent is a publish and when it was meant to go.
type sent struct {
	intended time.Time
	pending  Pending
}

// confirmer waits for one publisher's confirms in publish order.
type confirmer struct {
	lat      []time.Duration
	failed   int
	last     time.Time
	firstErr error
}

func (c *confirmer) run(ctx context.Context, in <-chan sent) {
	for s := range in {
		arrived, err := s.pending.Wait(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			c.failed++
			if c.firstErr == nil {
				c.firstErr = err
			}
			continue
		}
		c.lat = append(c.lat, arrived.Sub(s.intended))
		if arrived.After(c.last) {
			c.last = arrived
		}
	}
}
