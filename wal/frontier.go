package wal

import (
	"container/heap"
	"context"
	"sync"
	"sync/atomic"
)

// frontier is a position in the log (the next offset past what it covers)
// with waiters keyed by the position they need. Advancing it wakes exactly
// the waiters it satisfies, lowest target first; nobody else re-checks.
type frontier struct {
	v atomic.Uint64

	mu      sync.Mutex // guards waiters, err and wakes
	waiters waiterHeap
	err     error // set once the frontier can no longer reach its waiters
	wakes   uint64
}

type frontierWaiter struct {
	target uint64
	ch     chan error
}

type waiterHeap []*frontierWaiter

func (h waiterHeap) Len() int           { return len(h) }
func (h waiterHeap) Less(i, j int) bool { return h[i].target < h[j].target }
func (h waiterHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *waiterHeap) Push(x any)        { *h = append(*h, x.(*frontierWaiter)) }
func (h *waiterHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return w
}

func (f *frontier) load() uint64 { return f.v.Load() }

// advance moves the frontier up to v and wakes the waiters it now covers.
func (f *frontier) advance(v uint64) {
	f.v.Store(v)
	f.mu.Lock()
	for len(f.waiters) > 0 && f.waiters[0].target <= v {
		w := heap.Pop(&f.waiters).(*frontierWaiter)
		w.ch <- nil
		f.wakes++
	}
	f.mu.Unlock()
}

// fallBack moves the frontier down to v (a latched log's written frontier
// falls back to the durable end) and fails every waiter with err, since the
// frontier will not move again.
func (f *frontier) fallBack(v uint64, err error) {
	f.v.Store(v)
	f.fail(err)
}

// fail wakes every waiter with err and makes later waits fail with it.
func (f *frontier) fail(err error) {
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	for len(f.waiters) > 0 {
		w := heap.Pop(&f.waiters).(*frontierWaiter)
		w.ch <- f.err
		f.wakes++
	}
	f.mu.Unlock()
}

// wait blocks until the frontier reaches target, the frontier fails, or ctx
// ends. It returns the frontier's value.
func (f *frontier) wait(ctx context.Context, target uint64) (uint64, error) {
	if v := f.v.Load(); v >= target {
		return v, nil
	}
	f.mu.Lock()
	if v := f.v.Load(); v >= target {
		f.mu.Unlock()
		return v, nil
	}
	if f.err != nil {
		err := f.err
		f.mu.Unlock()
		return f.v.Load(), err
	}
	w := &frontierWaiter{target: target, ch: make(chan error, 1)}
	heap.Push(&f.waiters, w)
	f.mu.Unlock()
	select {
	case err := <-w.ch:
		return f.v.Load(), err
	case <-ctx.Done():
		f.remove(w)
		return f.v.Load(), ctx.Err()
	}
}

// remove takes a cancelled waiter out of the heap, if it is still there.
func (f *frontier) remove(w *frontierWaiter) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, x := range f.waiters {
		if x == w {
			heap.Remove(&f.waiters, i)
			return
		}
	}
}

func (f *frontier) wakeCount() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.wakes
}
