package appliance

import (
	"container/heap"
	"fmt"
	"time"

	"github.com/fibril-edge/fibril/wal"
)

// partitionState is the pure state of one partition: which messages are
// unsettled, which of them are ready, and how often each was delivered. It
// changes only by applying log records in order (and by leasing, which is
// in memory only), so a snapshot plus a replay rebuilds it exactly. It does
// no I/O and reads no clock.
type partitionState struct {
	msgs        msgIndex
	ready       offsetHeap // may hold stale offsets: checked on pop
	count       int64      // unsettled messages
	bytes       int64      // what they store: storedSize of each
	appliedNext uint64     // offset after the last applied record
}

type msgStatus uint8

const (
	msgReady    msgStatus = iota
	msgLeased             // held by a subscription
	msgSettling           // a settle event is being appended
)

// message is what the broker keeps in memory per unsettled message; the
// body stays in the log.
type message struct {
	offset     uint64
	size       int64  // storedSize: what the queue's max_bytes counts
	deliveries uint32 // deliveries that ended without an ack (release, expiry)
	at         time.Time
	// id is the message id from the publish until the dedupe table has
	// it (rememberLocked, or the replay's addDedupe), then "": the table
	// keeps its own copy within its bounds, and an id held for every
	// unsettled message would not be bounded by them (2,400 ids of 64
	// KiB held 157 MB).
	id     string
	status msgStatus
}

// storedSize is what a message counts against its queue's MaxBytes and in
// its reported bytes: the body, every header's key and value, the id and
// the key. The record's fixed framing bytes do not count.
func storedSize(id, key string, headers []Header, body []byte) int64 {
	n := int64(len(id)) + int64(len(key)) + int64(len(body))
	for _, h := range headers {
		n += int64(len(h.Key)) + int64(len(h.Value))
	}
	return n
}

func newPartitionState(next uint64) *partitionState {
	return &partitionState{appliedNext: next}
}

// applyEffect tells the shell what an applied record changed.
type applyEffect uint8

const (
	effectNone       applyEffect = iota
	effectReady                  // a message became ready
	effectSettled                // a message left the queue
	effectOverLimit              // a message came back past max deliveries
	effectUnknownRef             // a settle named an offset that is not unsettled
)

// apply applies one record. maxDeliveries (0: unlimited) marks a message
// that came back too often, which the shell dead-letters.
func (s *partitionState) apply(r wal.Record, maxDeliveries int) (applyEffect, error) {
	if r.Offset != s.appliedNext {
		return effectNone, fmt.Errorf("apply offset %d, expected %d", r.Offset, s.appliedNext)
	}
	s.appliedNext = r.Offset + 1
	if r.Type == recMarker {
		return effectNone, nil
	}
	if isPublish(r.Type) {
		p, err := decodePublish(r.Type, r.Payload)
		if err != nil {
			return effectNone, fmt.Errorf("offset %d: %w", r.Offset, err)
		}
		m := &message{offset: r.Offset, size: storedSize(p.MessageID, p.Key, p.Headers, p.Body), at: p.At, id: p.MessageID}
		s.add(m)
		return effectReady, nil
	}
	return s.settleRecord(r, maxDeliveries)
}

// settleRecord applies a record that settles or releases an earlier
// message (ack, discard, dead-letter, release, expire). The caller has
// placed it in the log's order; r.Offset only names it in errors.
func (s *partitionState) settleRecord(r wal.Record, maxDeliveries int) (applyEffect, error) {
	target, err := decodeSettle(r.Payload)
	if err != nil {
		return effectNone, fmt.Errorf("offset %d: %w", r.Offset, err)
	}
	m := s.msgs.get(target)
	if m == nil {
		return effectUnknownRef, nil
	}
	switch r.Type {
	case recAck, recDiscard, recDeadLetter:
		s.remove(m)
		return effectSettled, nil
	case recRelease, recExpire:
		m.deliveries++
		if maxDeliveries > 0 && int(m.deliveries) >= maxDeliveries {
			m.status = msgSettling
			return effectOverLimit, nil
		}
		s.makeReady(m)
		return effectReady, nil
	}
	return effectNone, fmt.Errorf("offset %d: unknown record type %d", r.Offset, r.Type)
}

func (s *partitionState) add(m *message) {
	s.msgs.put(m)
	s.count++
	s.bytes += m.size
	s.makeReady(m)
}

func (s *partitionState) remove(m *message) {
	s.msgs.delete(m.offset)
	s.count--
	s.bytes -= m.size
}

func (s *partitionState) makeReady(m *message) {
	m.status = msgReady
	heap.Push(&s.ready, m.offset)
}

// nextReady leases the lowest ready message, or returns nil.
func (s *partitionState) nextReady() *message {
	for s.ready.Len() > 0 {
		off := heap.Pop(&s.ready).(uint64)
		if m := s.msgs.get(off); m != nil && m.status == msgReady {
			m.status = msgLeased
			return m
		}
	}
	return nil
}

// oldestReady returns the lowest ready message without leasing it.
func (s *partitionState) oldestReady() *message {
	for s.ready.Len() > 0 {
		if m := s.msgs.get(s.ready[0]); m != nil && m.status == msgReady {
			return m
		}
		heap.Pop(&s.ready)
	}
	return nil
}

// unlease puts a leased message back to ready without counting a delivery
// (its subscription went away before anything was decided).
func (s *partitionState) unlease(offset uint64) {
	if m := s.msgs.get(offset); m != nil && m.status != msgReady {
		s.makeReady(m)
	}
}

// readyCount counts ready messages (for queue info).
func (s *partitionState) readyCount() (ready, inFlight int64) {
	s.msgs.each(func(m *message) bool {
		if m.status == msgReady {
			ready++
		} else {
			inFlight++
		}
		return true
	})
	return ready, inFlight
}

type offsetHeap []uint64

func (h offsetHeap) Len() int           { return len(h) }
func (h offsetHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h offsetHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *offsetHeap) Push(x any)        { *h = append(*h, x.(uint64)) }
func (h *offsetHeap) Pop() any {
	old := *h
	v := old[len(old)-1]
	*h = old[:len(old)-1]
	return v
}
