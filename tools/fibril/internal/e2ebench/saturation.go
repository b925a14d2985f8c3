package e2ebench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// RunSaturation publishes as fast as the broker confirms, with at most
// o.Window publishes in flight per publisher, for d on a fresh stream
// called name, while one consumer receives. ConfirmedPerSec and
// DeliveredPerSec count what was confirmed and delivered within d; the
// result has no latencies (a closed loop measures throughput only) and is
// always marked sustained.
func RunSaturation(ctx context.Context, t Target, name string, publishers int, d time.Duration, o RunOptions) (Result, error) {
	o = o.withDefaults(d)
	res := Result{Kind: "run", Case: "saturation", System: t.System(), Mode: t.Mode(),
		Seconds: d.Seconds(), Publishers: publishers, Window: o.Window, Payload: o.Payload}
	st, err := t.Open(ctx, name, publishers, o.Window)
	if err != nil {
		return res, err
	}
	defer st.Close()
	const unbounded = 1 << 40 // measured indexes are below; warm-up above
	var delivered, stopAt atomic.Int64
	stopAt.Store(1 << 62)
	o.Warmup = warmupFor(st, publishers, o)
	rec := newRecorder(0, o.Warmup, nil)
	rec.total = unbounded
	counting := func(body []byte, received, arrived time.Time) {
		if _, idx, err := DecodeBody(body); err == nil && idx < unbounded {
			if arrived.UnixNano() >= stopAt.Load() {
				return
			}
			if n := delivered.Add(1); o.Progress != nil && n%1024 == 0 {
				o.Progress(int(n))
			}
			return
		}
		rec.deliver(body, received, arrived)
	}
	if err := st.Consume(ctx, counting); err != nil {
		return res, err
	}
	if err := warmup(ctx, st, publishers, unbounded, o, rec); err != nil {
		return res, err
	}
	before, measured := sampleBefore(o.Pids)
	start := time.Now()
	stop := start.Add(d)
	stopAt.Store(stop.UnixNano())
	var confirmed, sentN, failed atomic.Int64
	var wg sync.WaitGroup
	drainCtx, cancel := context.WithDeadline(ctx, stop.Add(10*time.Second))
	defer cancel()
	for p := range publishers {
		// inFlight holds a slot from each publish until its confirm (or
		// failure) came back: at most o.Window are out at once. Confirms
		// that may come out of order free their slots as they come.
		ch, inFlight := make(chan Pending, o.Window), make(chan struct{}, o.Window)
		count := func(pend Pending) {
			arrived, err := pend.Wait(drainCtx)
			<-inFlight
			switch {
			case err == nil && arrived.Before(stop):
				confirmed.Add(1)
			case err != nil && drainCtx.Err() == nil:
				failed.Add(1)
			}
		}
		wg.Go(func() {
			for pend := range ch {
				if _, ok := pend.(unorderedPending); ok {
					wg.Go(func() { count(pend) })
					continue
				}
				count(pend)
			}
		})
		wg.Go(func() {
			defer close(ch)
			for i := 0; time.Now().Before(stop) && ctx.Err() == nil; i++ {
				select {
				case inFlight <- struct{}{}:
				case <-ctx.Done():
					return
				}
				pend, err := st.Publish(p, EncodeBody(o.Payload, time.Now(), i*publishers+p))
				if err != nil {
					<-inFlight
					failed.Add(1)
					return
				}
				sentN.Add(1)
				ch <- pend
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil { // stopped, not measured: no line for it
		return res, fmt.Errorf("saturation %s %s: run interrupted: %w", t.System(), t.Mode(), err)
	}
	deliveredInTime := delivered.Load()
	if measured {
		if after, err := sampleProcs(o.Pids); err == nil {
			res.Broker = usage(before, after, int(sentN.Load()), o.Payload)
		}
	}
	res.Sent, res.Confirmed, res.Failed = int(sentN.Load()), int(confirmed.Load()), int(failed.Load())
	res.Delivered = int(deliveredInTime)
	res.ConfirmedPerSec = float64(int(float64(res.Confirmed)/d.Seconds()*10)) / 10
	res.DeliveredPerSec = float64(int(float64(res.Delivered)/d.Seconds()*10)) / 10
	res.Sustained = true
	return res, nil
}
