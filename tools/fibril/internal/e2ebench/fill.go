package e2ebench

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Fill publishes n messages of payload bytes to a fresh queue or stream
// called name on t, from publishers publishers with window in flight each,
// waits for every confirm and returns the open stream (the caller closes
// it; a Target that deletes on Close must be told to keep it).
func Fill(ctx context.Context, t Target, name string, n, publishers, window, payload int) (Stream, error) {
	st, err := t.Open(ctx, name, publishers, window)
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	errs := make([]error, publishers)
	for p := range publishers {
		wg.Go(func() {
			ch := make(chan Pending, window)
			done := make(chan error, 1)
			go func() {
				var first error
				for pend := range ch {
					if _, err := pend.Wait(ctx); err != nil && first == nil {
						first = err
					}
				}
				done <- first
			}()
			for i := p; i < n; i += publishers {
				pend, err := st.Publish(p, EncodeBody(payload, time.Now(), i))
				if err != nil {
					errs[p] = err
					break
				}
				ch <- pend
			}
			close(ch)
			if err := <-done; errs[p] == nil {
				errs[p] = err
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			st.Close()
			return nil, fmt.Errorf("fill %s: %w", name, err)
		}
	}
	return st, nil
}
