package e2ebench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// RunOneSync is the plainest latency a user sees: one publisher sends one
// message, waits for its confirm, and sends the next, back to back, for d
// on a fresh stream called name, while one consumer receives. Confirm
// holds every publish's round trip and Deliver the time from each send to
// its delivery; ConfirmedPerSec is the confirms' rate. The run is
// sustained when every publish was confirmed and delivered within a grace
// period after d.
func RunOneSync(ctx context.Context, t Target, name string, d time.Duration, o RunOptions) (Result, error) {
	o = o.withDefaults(d)
	res := Result{Kind: "run", Case: "one-sync", System: t.System(), Mode: t.Mode(),
		Seconds: d.Seconds(), Publishers: 1, Window: 1, Payload: o.Payload}
	st, err := t.Open(ctx, name, 1, 1)
	if err != nil {
		return res, err
	}
	defer st.Close()
	const unbounded = 1 << 40 // measured indexes are below; warm-up above
	var (
		mu        sync.Mutex // guards deliver
		deliver   []time.Duration
		delivered atomic.Int64
		allIn     = make(chan struct{})
		allInOnce sync.Once
		expected  atomic.Int64 // the confirmed count, once the loop ends
	)
	expected.Store(1 << 62)
	o.Warmup = warmupFor(st, 1, o)
	rec := newRecorder(0, o.Warmup, nil)
	rec.total = unbounded
	if err := st.Consume(ctx, func(body []byte, received, arrived time.Time) {
		sentAt, idx, err := DecodeBody(body)
		if err != nil || idx >= unbounded {
			rec.deliver(body, received, arrived)
			return
		}
		mu.Lock()
		deliver = append(deliver, arrived.Sub(sentAt))
		mu.Unlock()
		if delivered.Add(1) >= expected.Load() {
			allInOnce.Do(func() { close(allIn) })
		}
	}); err != nil {
		return res, err
	}
	if err := warmup(ctx, st, 1, unbounded, o, rec); err != nil {
		return res, err
	}
	before, measured := sampleBefore(o.Pids)
	var lat []time.Duration
	start := time.Now()
	stop := start.Add(d)
	for i := 0; time.Now().Before(stop); i++ {
		sentAt := time.Now()
		pend, err := st.Publish(0, EncodeBody(o.Payload, sentAt, i))
		var arrived time.Time
		if err == nil {
			arrived, err = pend.Wait(ctx)
		}
		if err != nil {
			res.Failed++
			if res.FirstError == "" {
				res.FirstError = err.Error()
			}
			if ctx.Err() != nil {
				return res, fmt.Errorf("one-sync: %w", ctx.Err())
			}
			continue
		}
		lat = append(lat, arrived.Sub(sentAt))
	}
	elapsed := time.Since(start)
	expected.Store(int64(len(lat)))
	if delivered.Load() >= int64(len(lat)) {
		allInOnce.Do(func() { close(allIn) })
	}
	select {
	case <-allIn:
	case <-time.After(max(500*time.Millisecond, d/10)):
	case <-ctx.Done():
		return res, fmt.Errorf("one-sync: %w", ctx.Err())
	}
	if measured {
		if after, err := sampleProcs(o.Pids); err == nil {
			res.Broker = usage(before, after, len(lat)+res.Failed, o.Payload)
		}
	}
	res.Sent, res.Confirmed = len(lat)+res.Failed, len(lat)
	res.Delivered = int(delivered.Load())
	res.ConfirmedPerSec = float64(int(float64(res.Confirmed)/elapsed.Seconds()*10)) / 10
	res.DeliveredPerSec = float64(int(float64(res.Delivered)/elapsed.Seconds()*10)) / 10
	res.Sustained = res.Failed == 0 && res.Delivered >= res.Confirmed
	if res.Sustained {
		mu.Lock()
		confirm, deliverLat := summarize(lat), summarize(deliver)
		mu.Unlock()
		res.Confirm, res.Deliver = &confirm, &deliverLat
	}
	return res, nil
}
