package client

import (
	"reflect"
	"testing"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// Settles are grouped by subscription, kind and delay, in the order each
// group first appeared, and a group too long for one frame is split into
// frames that each fit.
func TestSettleFrames(t *testing.T) {
	var b settleBatch
	b.add(1, settleAck, 0, 10)
	b.add(1, settleRequeue, 500, 11)
	b.add(1, settleExtend, 0, 12)
	b.add(1, settleRequeue, 0, 13)
	b.add(1, settleRequeue, 500, 14)
	b.add(2, settleExtend, 0, 15)
	b.add(1, settleAck, 0, 16)
	got := settleFrames(b.take(), wire.MaxFrameLimit)
	want := []wire.Frame{
		&wire.Ack{SubID: 1, Tags: []uint64{10, 16}},
		&wire.Nack{SubID: 1, Tags: []uint64{11, 14}, Requeue: true, DelayMillis: 500},
		&wire.Extend{SubID: 1, Tags: []uint64{12}},
		&wire.Nack{SubID: 1, Tags: []uint64{13}, Requeue: true},
		&wire.Extend{SubID: 2, Tags: []uint64{15}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("frames:\n got %+v\nwant %+v", got, want)
	}

	const maxFrame = wire.MinFrameLimit
	tags := make([]uint64, 3*maxFrame/8)
	for i := range tags {
		tags[i] = uint64(i + 1)
	}
	for _, kind := range []settleKind{settleAck, settleRequeue, settleDiscard, settleExtend} {
		var sent []uint64
		for _, f := range settleFrames([]settleGroup{{subID: 1, kind: kind, delayMillis: 1, tags: tags}}, maxFrame) {
			b, err := wire.AppendFrame(nil, f)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(b) - 4; n > maxFrame {
				t.Fatalf("kind %d: a frame of %d bytes, limit %d", kind, n, maxFrame)
			}
			switch f := f.(type) {
			case *wire.Ack:
				sent = append(sent, f.Tags...)
			case *wire.Nack:
				sent = append(sent, f.Tags...)
			case *wire.Extend:
				sent = append(sent, f.Tags...)
			}
		}
		if !reflect.DeepEqual(sent, tags) {
			t.Fatalf("kind %d: sent %d tags, want %d in order", kind, len(sent), len(tags))
		}
	}
}
