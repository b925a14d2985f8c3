package appliance

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A message within MaxMessageBytes but larger than a segment can hold is
// refused as too large, not as an unavailable queue, and the queue goes on.
func TestRecordPastSegmentIsTooLarge(t *testing.T) {
	ctx := testCtx(t)
	b := openBroker(t, vfs.NewMem(), "data", Options{SegmentSize: 64 << 10})
	defer func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	}()
	declare(t, ctx, b, QueueConfig{Name: "q"})
	_, err := b.Publish(ctx, "q", Message{Body: make([]byte, 100<<10)})
	if !errors.Is(err, ErrTooLarge) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("publish past the segment size: %v, want ErrTooLarge only", err)
	}
	publish(t, ctx, b, "q", Message{Body: body(1)})
}
