package wire

import (
	"fmt"
	"math"
)

// Queue management frames, version 5: a client reads a queue's state,
// purges its ready messages and deletes it over the protocol it already
// speaks, instead of reaching for the admin HTTP API. Each request has a
// reply frame of its own, so a client never has to guess what an answer
// means from its shape.

// QueueInfo (version 5) asks for a queue's state; the answer is a
// QueueInfoReply or an Error (not_found; served_elsewhere on a cluster
// node that does not serve the queue, naming the node that does).
type QueueInfo struct {
	Corr  uint64
	Queue string
}

func (*QueueInfo) Type() FrameType { return TypeQueueInfo }

func (f *QueueInfo) AppendBody(b []byte) []byte {
	b = appendU64(b, f.Corr)
	return appendString(b, f.Queue)
}

func (f *QueueInfo) Validate() error {
	v := validator{typ: TypeQueueInfo}
	v.text("Queue", f.Queue)
	return v.result()
}

func decodeQueueInfo(d decoder) (Frame, error) {
	f := &QueueInfo{Corr: d.u64("Corr"), Queue: d.text("Queue")}
	return f, d.finish()
}

// PartitionFrontiers are one partition log's two frontiers. They are
// separate fields because they are separate promises: a record below
// WrittenNext survives a crash of the broker process, one below
// DurableNext also a power loss.
type PartitionFrontiers struct {
	WrittenNext uint64 // offset after the last record handed to the operating system
	DurableNext uint64 // offset after the last record synced to disk; never above WrittenNext
}

// partitionFrontiersLen is the encoded size of one PartitionFrontiers.
const partitionFrontiersLen = 8 + 8

// QueueInfoReply (version 5) answers a QueueInfo with the queue's state
// when the server read it. Counts are of unsettled messages: Ready ones
// wait for a consumer, InFlight ones are leased to one (delivered, not
// acked yet). Bytes is what they store, counted as the queue's MaxBytes
// limit counts it.
type QueueInfoReply struct {
	Corr        uint64
	Queue       string
	Durability  Durability // the mode in effect: durable or buffered
	Ready       uint64
	InFlight    uint64
	Bytes       uint64
	Consumers   uint32
	Unavailable string // why the queue is not serving (a latched log); "" while it serves
	// Partitions holds one entry per partition, in partition order; its
	// length is the queue's partition count.
	Partitions []PartitionFrontiers
}

func (*QueueInfoReply) Type() FrameType { return TypeQueueInfoReply }

func (f *QueueInfoReply) AppendBody(b []byte) []byte {
	b = appendU64(b, f.Corr)
	b = appendString(b, f.Queue)
	b = appendU8(b, uint8(f.Durability))
	b = appendU64(b, f.Ready)
	b = appendU64(b, f.InFlight)
	b = appendU64(b, f.Bytes)
	b = appendU32(b, f.Consumers)
	b = appendString(b, f.Unavailable)
	ps := f.Partitions[:min(len(f.Partitions), math.MaxUint16)]
	b = appendU16(b, uint16(len(ps)))
	for _, p := range ps {
		b = appendU64(b, p.WrittenNext)
		b = appendU64(b, p.DurableNext)
	}
	return b
}

func (f *QueueInfoReply) Validate() error {
	v := validator{typ: TypeQueueInfoReply}
	v.text("Queue", f.Queue)
	v.checkf("Durability", f.Durability == DurabilityDurable || f.Durability == DurabilityBuffered,
		"value %d (want 1 or 2)", f.Durability)
	v.text("Unavailable", f.Unavailable)
	v.checkf("Partitions", len(f.Partitions) <= math.MaxUint16,
		"%d partitions exceeds the limit of %d", len(f.Partitions), math.MaxUint16)
	return v.result()
}

func decodeQueueInfoReply(d decoder) (Frame, error) {
	f := &QueueInfoReply{
		Corr:        d.u64("Corr"),
		Queue:       d.text("Queue"),
		Durability:  Durability(d.enum("Durability", uint8(DurabilityDurable), uint8(DurabilityBuffered))),
		Ready:       d.u64("Ready"),
		InFlight:    d.u64("InFlight"),
		Bytes:       d.u64("Bytes"),
		Consumers:   d.u32("Consumers"),
		Unavailable: d.text("Unavailable"),
	}
	f.Partitions = d.partitionFrontiers("Partitions")
	return f, d.finish()
}

// partitionFrontiers reads a u16 count and that many frontier pairs,
// checking the count against the bytes left before allocating.
func (d *decoder) partitionFrontiers(field string) []PartitionFrontiers {
	off := d.off
	n := uint64(d.u16(field))
	if d.err != nil || n == 0 {
		return nil
	}
	if left := uint64(len(d.body) - d.off); n*partitionFrontiersLen > left {
		d.fail(field, off, fmt.Sprintf("%d partitions cannot fit in the %d bytes left", n, left))
		return nil
	}
	ps := make([]PartitionFrontiers, n)
	for i := range ps {
		ps[i].WrittenNext = d.u64("Partitions.WrittenNext")
		ps[i].DurableNext = d.u64("Partitions.DurableNext")
	}
	return ps
}

// PurgeQueue (version 5) discards a queue's ready messages; messages
// leased to consumers stay with them. The answer is a Purged or an Error
// (not_found; served_elsewhere, naming the node that serves the queue).
type PurgeQueue struct {
	Corr  uint64
	Queue string
}

func (*PurgeQueue) Type() FrameType { return TypePurgeQueue }

func (f *PurgeQueue) AppendBody(b []byte) []byte {
	b = appendU64(b, f.Corr)
	return appendString(b, f.Queue)
}

func (f *PurgeQueue) Validate() error {
	v := validator{typ: TypePurgeQueue}
	v.text("Queue", f.Queue)
	return v.result()
}

func decodePurgeQueue(d decoder) (Frame, error) {
	f := &PurgeQueue{Corr: d.u64("Corr"), Queue: d.text("Queue")}
	return f, d.finish()
}

// Purged (version 5) answers a PurgeQueue: Purged messages were
// discarded, each recorded in the queue's log at its durability before
// the answer was sent.
type Purged struct {
	Corr   uint64
	Queue  string
	Purged uint64
}

func (*Purged) Type() FrameType { return TypePurged }

func (f *Purged) AppendBody(b []byte) []byte {
	b = appendU64(b, f.Corr)
	b = appendString(b, f.Queue)
	return appendU64(b, f.Purged)
}

func (f *Purged) Validate() error {
	v := validator{typ: TypePurged}
	v.text("Queue", f.Queue)
	return v.result()
}

func decodePurged(d decoder) (Frame, error) {
	f := &Purged{Corr: d.u64("Corr"), Queue: d.text("Queue"), Purged: d.u64("Purged")}
	return f, d.finish()
}

// DeleteQueue (version 5) deletes a queue with its messages. With IfEmpty
// the server refuses (conflict) a queue that holds messages, ready or in
// flight. The answer is a Deleted or an Error (not_found, conflict).
type DeleteQueue struct {
	Corr    uint64
	Queue   string
	IfEmpty bool
}

func (*DeleteQueue) Type() FrameType { return TypeDeleteQueue }

func (f *DeleteQueue) AppendBody(b []byte) []byte {
	b = appendU64(b, f.Corr)
	b = appendString(b, f.Queue)
	return appendBool(b, f.IfEmpty)
}

func (f *DeleteQueue) Validate() error {
	v := validator{typ: TypeDeleteQueue}
	v.text("Queue", f.Queue)
	return v.result()
}

func decodeDeleteQueue(d decoder) (Frame, error) {
	f := &DeleteQueue{Corr: d.u64("Corr"), Queue: d.text("Queue"), IfEmpty: d.bool("IfEmpty")}
	return f, d.finish()
}

// Deleted (version 5) answers a DeleteQueue: the queue is gone, and its
// subscriptions were ended (Unsubscribed with Corr 0).
type Deleted struct {
	Corr  uint64
	Queue string
}

func (*Deleted) Type() FrameType { return TypeDeleted }

func (f *Deleted) AppendBody(b []byte) []byte {
	b = appendU64(b, f.Corr)
	return appendString(b, f.Queue)
}

func (f *Deleted) Validate() error {
	v := validator{typ: TypeDeleted}
	v.text("Queue", f.Queue)
	return v.result()
}

func decodeDeleted(d decoder) (Frame, error) {
	f := &Deleted{Corr: d.u64("Corr"), Queue: d.text("Queue")}
	return f, d.finish()
}
