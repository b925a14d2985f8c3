package appliance

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Deletions racing the broker's Close each end as done, not found or
// closed, and none reaches the metadata store after Close closed it (it
// panicked when a cluster's recovery released a queue as its node shut
// down). A deletion after Close is refused as closed.
func TestDeleteQueueRacingClose(t *testing.T) {
	ctx := testCtx(t)
	for round := range 20 {
		b := openBroker(t, vfs.NewMem(), "data", Options{})
		for i := range 8 {
			declare(t, ctx, b, QueueConfig{Name: fmt.Sprint("q", i)})
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := range 8 {
			wg.Go(func() { errs <- b.DeleteQueue(ctx, fmt.Sprint("q", i)) })
		}
		if err := b.Close(); err != nil {
			t.Fatalf("round %d: close: %v", round, err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrNotFound) {
				t.Fatalf("round %d: a deletion racing Close: %v", round, err)
			}
		}
		if err := b.DeleteQueue(ctx, "q0"); !errors.Is(err, ErrClosed) {
			t.Fatalf("round %d: a deletion after Close: %v, want ErrClosed", round, err)
		}
	}
}
