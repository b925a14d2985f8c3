package server

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// Outbox limits. Over the soft limit the reader stops reading until the
// writer catches up; past the hard limit the connection is closed, since
// its client is not reading what it asked for.
const (
	softFrames = 512
	softBytes  = 1 << 20
	hardFrames = 1 << 16
	hardBytes  = 64 << 20 // or 4 × MaxFrame, if larger
)

// outFrame is one queued frame. A closing frame (frame may be nil) ends
// the connection: the writer sends it, flushes, and shuts its side down.
// A delivery (a Deliver frame) counts in the delivery budget until it is
// written.
type outFrame struct {
	frame    wire.Frame
	size     int
	closing  bool
	delivery bool
}

// outbox is a connection's outbound queue: many producers (the reader and
// broker callbacks), one consumer (the writer).
type outbox struct {
	mu      sync.Mutex // guards the fields below
	frames  []outFrame
	bytes   int
	ended   bool          // a closing frame was queued, or the connection closed
	room    chan struct{} // closed (and replaced) when the writer takes frames
	hardCap int
	// delivered is the bytes of deliveries pushed and not yet written:
	// queued here or taken by the writer. Every change to it goes to the
	// server's budget too; released stops both once the writer is gone.
	delivered int64
	released  bool

	budget          *deliveryBudget
	deliveredMirror atomic.Int64  // mirrors delivered, for the budget's scans
	ready           chan struct{} // capacity 1: wakes the writer
}

func newOutbox(maxFrame int, budget *deliveryBudget) *outbox {
	return &outbox{room: make(chan struct{}), ready: make(chan struct{}, 1), hardCap: max(hardBytes, 4*maxFrame), budget: budget}
}

var errOutboxFull = errors.New("outbound queue past its hard limit: the client is not reading")

// push queues a frame without waiting. It reports false if the frame was
// dropped because the connection is ending, and errOutboxFull if queueing
// it would pass the hard limit.
func (o *outbox) push(f outFrame) (bool, error) {
	o.mu.Lock()
	if o.ended {
		o.mu.Unlock()
		return false, nil
	}
	if len(o.frames) > 0 && (len(o.frames) >= hardFrames || o.bytes+f.size > o.hardCap) {
		o.mu.Unlock()
		return false, errOutboxFull
	}
	o.frames = append(o.frames, f)
	o.bytes += f.size
	if f.closing {
		o.ended = true
	}
	o.mu.Unlock()
	select {
	case o.ready <- struct{}{}:
	default:
	}
	return true, nil
}

// pushDelivery is push for a delivery: it is counted until written, and
// total is the budget's total after it.
func (o *outbox) pushDelivery(f outFrame) (ok bool, total int64, err error) {
	o.mu.Lock()
	if o.ended || (len(o.frames) > 0 && (len(o.frames) >= hardFrames || o.bytes+f.size > o.hardCap)) {
		ended := o.ended
		o.mu.Unlock()
		if ended {
			return false, 0, nil
		}
		return false, 0, errOutboxFull
	}
	o.frames = append(o.frames, f)
	o.bytes += f.size
	total = o.countLocked(int64(f.size))
	o.mu.Unlock()
	select {
	case o.ready <- struct{}{}:
	default:
	}
	return true, total, nil
}

// countLocked adds n (negative: written or dropped) to the deliveries
// counted and returns the budget's total.
func (o *outbox) countLocked(n int64) int64 {
	o.delivered += n
	o.deliveredMirror.Store(o.delivered)
	return o.budget.add(n)
}

// sent says the writer wrote (or skipped) a delivery of n bytes.
func (o *outbox) sent(n int) {
	o.mu.Lock()
	if !o.released {
		o.countLocked(-int64(n))
	}
	o.mu.Unlock()
}

// queuedDeliveries is the bytes of deliveries pushed and not yet written.
func (o *outbox) queuedDeliveries() int64 { return o.deliveredMirror.Load() }

// dropDeliveries drops the deliveries still queued (not those the writer
// took), keeping the other frames.
func (o *outbox) dropDeliveries() {
	o.mu.Lock()
	defer o.mu.Unlock()
	kept := o.frames[:0]
	for _, f := range o.frames {
		if !f.delivery {
			kept = append(kept, f)
			continue
		}
		o.bytes -= f.size
		if !o.released {
			o.countLocked(-int64(f.size))
		}
	}
	clear(o.frames[len(kept):])
	o.frames = kept
}

// release runs when the writer stops: nothing queued will be written, so
// the deliveries stop counting and no more are taken.
func (o *outbox) release() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.released {
		o.countLocked(-o.delivered)
		o.released = true
	}
	o.ended = true
	o.frames, o.bytes = nil, 0
}

// roomWait returns nil if the outbox is under its soft limit, else a
// channel closed when the writer next takes frames.
func (o *outbox) roomWait() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.frames) < softFrames && o.bytes < softBytes {
		return nil
	}
	return o.room
}

// take removes and returns everything queued.
func (o *outbox) take() []outFrame {
	o.mu.Lock()
	defer o.mu.Unlock()
	fs := o.frames
	if len(fs) == 0 {
		return nil
	}
	o.frames, o.bytes = nil, 0
	close(o.room)
	o.room = make(chan struct{})
	return fs
}

// end drops whatever is queued and refuses more.
func (o *outbox) end() {
	o.mu.Lock()
	o.ended = true
	o.frames, o.bytes = nil, 0
	o.mu.Unlock()
}

// frameSize estimates a frame's encoded size for the outbox limits.
func frameSize(f wire.Frame) int {
	if d, ok := f.(*wire.Deliver); ok {
		return 4 + d.FrameLen()
	}
	return 64
}
