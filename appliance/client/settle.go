package client

import "github.com/fibril-edge/fibril/appliance/wire"

// Settles are batched per connection: Ack and Nack only queue their tag and
// wake the writer. When the writer is idle it sends the tag at once; while
// it is busy writing or flushing, tags pile up and go out together, one
// Ack, Nack or Extend frame per subscription, kind and delay, at the
// writer's next turn. No timer is involved. InProgress (an Extend) goes
// the same way, though it settles nothing.

// settleKind is what a settle does with its tags.
type settleKind uint8

const (
	settleAck settleKind = iota
	settleRequeue
	settleDiscard
	settleExtend // not a settle: the lease runs on (protocol version 5)
)

// settleGroup is the tags of one subscription, kind and requeue delay
// (0 but for a delayed requeue), in settle order.
type settleGroup struct {
	subID       uint32
	kind        settleKind
	delayMillis uint32
	tags        []uint64
}

// settleBatch is the settles waiting for the writer. A connection has few
// subscriptions, so groups are found by a linear scan.
type settleBatch struct {
	groups []settleGroup
}

func (b *settleBatch) add(subID uint32, kind settleKind, delayMillis uint32, tag uint64) {
	for i := range b.groups {
		if g := &b.groups[i]; g.subID == subID && g.kind == kind && g.delayMillis == delayMillis {
			g.tags = append(g.tags, tag)
			return
		}
	}
	b.groups = append(b.groups, settleGroup{subID: subID, kind: kind, delayMillis: delayMillis, tags: []uint64{tag}})
}

func (b *settleBatch) take() []settleGroup {
	g := b.groups
	b.groups = nil
	return g
}

// settleFrames turns groups into Ack, Nack and Extend frames, splitting a
// group whose tags would not fit one frame of maxFrame.
func settleFrames(groups []settleGroup, maxFrame int) []wire.Frame {
	// type byte + SubID + tag count + Requeue and DelayMillis (Nack only),
	// then 8 per tag.
	perFrame := max((maxFrame-14)/8, 1)
	var frames []wire.Frame
	for _, g := range groups {
		for tags := g.tags; len(tags) > 0; {
			n := min(len(tags), perFrame)
			switch g.kind {
			case settleAck:
				frames = append(frames, &wire.Ack{SubID: g.subID, Tags: tags[:n]})
			case settleExtend:
				frames = append(frames, &wire.Extend{SubID: g.subID, Tags: tags[:n]})
			default:
				frames = append(frames, &wire.Nack{SubID: g.subID, Tags: tags[:n], Requeue: g.kind == settleRequeue,
					DelayMillis: g.delayMillis})
			}
			tags = tags[n:]
		}
	}
	return frames
}
