package appliance

import (
	"bytes"
	"testing"
)

// Fuzz targets for the decoders of what a queue log and the metadata
// store hold (`make fuzz` runs each briefly). A decoder must never panic
// on damaged bytes, and what it accepts must encode back to the same
// bytes, so nothing decodes to a value the broker would store differently.

// FuzzDecodeEvents decodes arbitrary bytes as a publish record (with and
// without a key) and as a settle record.
func FuzzDecodeEvents(f *testing.F) {
	f.Add(encodePublish(goldenPublish()))
	f.Add(encodePublish(goldenKeyedPublish()))
	f.Add(encodePublish(publishRecord{At: goldenAt}))
	f.Add(encodeSettle(7))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, typ := range []byte{recPublish, recPublishKeyed} {
			p, err := decodePublish(typ, b)
			if err != nil {
				continue
			}
			if p.recordType() != typ {
				t.Fatalf("%x as record type %d decodes to %+v, stored as type %d", b, typ, p, p.recordType())
			}
			if again := encodePublish(p); !bytes.Equal(again, b) {
				t.Fatalf("publish record %x (type %d) decodes to %+v, which encodes to %x", b, typ, p, again)
			}
		}
		if off, err := decodeSettle(b); err == nil {
			if again := encodeSettle(off); !bytes.Equal(again, b) {
				t.Fatalf("settle record %x decodes to %d, which encodes to %x", b, off, again)
			}
		}
	})
}

// FuzzDecodeSnapshot decodes arbitrary bytes as a partition snapshot; one
// it accepts must restore a state and capture back to itself.
func FuzzDecodeSnapshot(f *testing.F) {
	f.Add(goldenSnapshot().encode())
	f.Add(snapshot{Boundary: 1}.encode())
	f.Add(make([]byte, 16))
	f.Fuzz(func(t *testing.T, b []byte) {
		snap, err := decodeSnapshot(b)
		if err != nil {
			return
		}
		if again := snap.encode(); !bytes.Equal(again, b) {
			t.Fatalf("snapshot %x decodes to %+v, which encodes to %x", b, snap, again)
		}
		st := snap.restore()
		if st.appliedNext != snap.Boundary {
			t.Fatalf("restored state applies from %d, snapshot boundary %d", st.appliedNext, snap.Boundary)
		}
		if int(st.count) > len(snap.Messages) {
			t.Fatalf("restored %d messages from a snapshot of %d", st.count, len(snap.Messages))
		}
	})
}
