package admin

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"golang.org/x/sync/semaphore"
)

// DefaultPublishBytesInFlight is Options.PublishBytesInFlight's default:
// four publishes of the largest size at once.
const DefaultPublishBytesInFlight = 4 * maxMessageRequest

// publishBudgetWait is how long a publish waits for room in the budget
// before it is refused as busy.
const publishBudgetWait = 10 * time.Second

// publishBudget bounds the bytes of publish bodies the admin API holds at
// once, over every connection: each request takes its body's length
// (Content-Length, or the largest body when it is not sent) before
// reading it and gives it back once answered. MaxConnections alone lets
// 64 bodies of 16 MiB, and the copies decoding them makes, be held at
// once; the budget keeps that to a few, and makes the rest wait.
type publishBudget struct {
	sem  *semaphore.Weighted
	size int64
	wait time.Duration // publishBudgetWait
}

func newPublishBudget(size int64) *publishBudget {
	return &publishBudget{sem: semaphore.NewWeighted(size), size: size, wait: publishBudgetWait}
}

// charge is what a request takes from the budget: its body's announced
// length, at most the largest body and the budget itself.
func (b *publishBudget) charge(r *http.Request) int64 {
	n := r.ContentLength
	if n < 0 || n > maxMessageRequest {
		n = maxMessageRequest
	}
	return max(1, min(n, b.size))
}

// wrap holds h's requests until their bodies fit in the budget, or
// refuses them as busy (503) after publishBudgetWait.
func (b *publishBudget) wrap(h apiFunc) apiFunc {
	return func(r *http.Request) (int, any, error) {
		n := b.charge(r)
		ctx, cancel := context.WithTimeout(r.Context(), b.wait)
		err := b.sem.Acquire(ctx, n)
		cancel()
		if err != nil {
			return 0, nil, &Error{Status: http.StatusServiceUnavailable, Code: "busy",
				Err: fmt.Errorf("publishes in progress hold the admin API's %d-byte publish budget; retry", b.size)}
		}
		defer b.sem.Release(n)
		return h(r)
	}
}
