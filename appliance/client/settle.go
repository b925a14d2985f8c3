package client

import "github.com/fibril-edge/fibril/appliance/wire"

// Settles are batched per connection: Ack and Nack only queue their tag and
// wake the writer. When the writer is idle it sends the tag at once; while
// it is busy writing or flushing, tags pile up and go out together, one
// Ack or Nack frame per subscription and kind, at the writer's next turn.
// No timer is involved.

// settleKind is what a settle does with its tags.
type settleKind uint8

const (
	settleAck settleKind = iota
	settleRequeue
	settleDiscard
)

// settleGroup is the tags of one subscription and kind, in settle order.
type settleGroup struct {
	subID uint32
	kind  settleKind
	tags  []uint64
}

// settleBatch is the settles waiting for the writer. A connection has few
// subscriptions, so groups are found by a linear scan.
type settleBatch struct {
	groups []settleGroup
}

func (b *settleBatch) add(subID uint32, kind settleKind, tag uint64) {
	for i := range b.groups {
		if g := &b.groups[i]; g.subID == subID && g.kind == kind {
			g.tags = append(g.tags, tag)
			return
		}
	}
	b.groups = append(b.groups, settleGroup{subID: subID, kind: kind, tags: []uint64{tag}})
}

func (b *settleBatch) take() []settleGroup {
	g := b.groups
	b.groups = nil
	return g
}

// settleFrames turns groups into Ack and Nack frames, splitting a group
// whose tags would not fit one frame of maxFrame.
func settleFrames(groups []settleGroup, maxFrame int) []wire.Frame {
	// type byte + SubID + tag count + Requeue (Nack only), then 8 per tag.
	perFrame := max((maxFrame-10)/8, 1)
	var frames []wire.Frame
	for _, g := range groups {
		for tags := g.tags; len(tags) > 0; {
			n := min(len(tags), perFrame)
			switch g.kind {
			case settleAck:
				frames = append(frames, &wire.Ack{SubID: g.subID, Tags: tags[:n]})
			default:
				frames = append(frames, &wire.Nack{SubID: g.subID, Tags: tags[:n], Requeue: g.kind == settleRequeue})
			}
			tags = tags[n:]
		}
	}
	return frames
}
