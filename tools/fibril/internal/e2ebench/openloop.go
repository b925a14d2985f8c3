package e2ebench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"
)

// RunOpenLoop plays schedule s against a fresh stream called name on t
// and returns the run's result (Kind, Case and the counts and rates
// filled; Run, Order and Env are the caller's).
//
// Each publisher sleeps until a message's intended time (on its own OS
// thread, in nanosleep, for precision) and publishes it, late if it fell
// behind (never skipping); its confirms are awaited in order by a second
// goroutine. Result.SendLag says how late the sends were. Confirm and delivery latencies run from
// the intended time. The run ends when everything has been delivered, or
// at a cut-off of the schedule plus twice the grace period (at least 2 s
// more): what has not arrived by then is missing and the run is not
// sustained.
func RunOpenLoop(ctx context.Context, t Target, name string, s Schedule, o RunOptions) (Result, error) {
	o = o.withDefaults(s.Duration)
	publishers := len(s.Sends)
	res := Result{Kind: "run", Case: s.Name, System: t.System(), Mode: t.Mode(), TargetRate: s.Rate,
		Seconds: s.Duration.Seconds(), Publishers: publishers, Window: o.Window, Payload: o.Payload}
	st, err := t.Open(ctx, name, publishers, o.Window)
	if err != nil {
		return res, err
	}
	defer st.Close()
	total := s.Total()
	o.Warmup = warmupFor(st, publishers, o)
	rec := newRecorder(total, o.Warmup, o.Progress)
	if err := st.Consume(ctx, rec.deliver); err != nil {
		return res, err
	}
	if err := warmup(ctx, st, publishers, total, o, rec); err != nil {
		return res, fmt.Errorf("%s %s: %w", t.System(), t.Mode(), err)
	}
	before, measured := sampleBefore(o.Pids)

	start := time.Now().Add(20 * time.Millisecond)
	cut := start.Add(s.Duration + max(2*o.Grace, 2*time.Second))
	runCtx, cancel := context.WithDeadline(ctx, cut)
	defer cancel()
	confirmers := make([]*confirmer, publishers)
	sentCount := make([]int, publishers)
	lags := make([][]time.Duration, publishers)
	var wg sync.WaitGroup
	for p := range publishers {
		ch := make(chan sent, len(s.Sends[p]))
		confirmers[p] = &confirmer{lat: make([]time.Duration, 0, len(s.Sends[p]))}
		wg.Go(func() { confirmers[p].run(runCtx, ch) })
		wg.Go(func() {
			defer close(ch)
			runtime.LockOSThread() // sleepPrecisely blocks the thread
			defer runtime.UnlockOSThread()
			for k, off := range s.Sends[p] {
				at := start.Add(off)
				if d := time.Until(at); d > 0 {
					sleepPrecisely(d)
				}
				if runCtx.Err() != nil {
					return
				}
				lags[p] = append(lags[p], time.Since(at))
				pend, err := st.Publish(p, EncodeBody(o.Payload, at, indexOf(s, p, k)))
				if err != nil {
					return
				}
				sentCount[p]++
				ch <- sent{intended: at, pending: pend}
			}
		})
	}
	wg.Wait()
	select {
	case <-rec.allIn:
	case <-runCtx.Done():
	}
	end := time.Now()
	if err := ctx.Err(); err != nil { // stopped, not measured: no line for it
		return res, fmt.Errorf("%s %s %s: run interrupted: %w", s.Name, t.System(), t.Mode(), err)
	}
	if measured {
		if after, err := sampleProcs(o.Pids); err == nil {
			res.Broker = usage(before, after, total, o.Payload)
		}
	}

	var confirmLat, lag []time.Duration
	var lastConfirm time.Time
	for p, c := range confirmers {
		res.Sent += sentCount[p]
		res.Failed += c.failed
		if c.firstErr != nil && res.FirstError == "" {
			res.FirstError = c.firstErr.Error()
		}
		confirmLat = append(confirmLat, c.lat...)
		lag = append(lag, lags[p]...)
		if c.last.After(lastConfirm) {
			lastConfirm = c.last
		}
	}
	res.Confirmed = len(confirmLat)
	rec.mu.Lock()
	res.Delivered = rec.delivered
	deliverLat := slices.Clone(rec.deliverLat)
	receiveLat, afterLat := slices.Clone(rec.receiveLat), slices.Clone(rec.afterLat)
	lastDelivery := rec.lastDelivery
	rec.mu.Unlock()

	res.ConfirmedPerSec = ratePer(res.Confirmed, start, lastConfirm, end)
	res.DeliveredPerSec = ratePer(res.Delivered, start, lastDelivery, end)
	endOfGrace := start.Add(s.Duration + o.Grace)
	res.Sustained = res.Confirmed == total && res.Delivered == total &&
		!lastConfirm.After(endOfGrace) && !lastDelivery.After(endOfGrace)
	if res.Sustained {
		c, d := summarize(confirmLat), summarize(deliverLat)
		res.Confirm, res.Deliver = &c, &d
		if len(receiveLat) == len(deliverLat) {
			r, a := summarize(receiveLat), summarize(afterLat)
			res.Receive, res.ReceiveToDeliver = &r, &a
		}
	}
	if len(lag) > 0 {
		l := summarize(lag)
		res.SendLag = &l
	}
	return res, nil
}

// indexOf numbers publisher p's k-th message uniquely within s.
func indexOf(s Schedule, p, k int) int {
	n := k
	for q := range p {
		n += len(s.Sends[q])
	}
	return n
}

// ratePer is count over the time from start to last (or to end, when
// nothing arrived).
func ratePer(count int, start, last, end time.Time) float64 {
	if last.IsZero() {
		last = end
	}
	secs := last.Sub(start).Seconds()
	if count == 0 || secs <= 0 {
		return 0
	}
	return float64(int(float64(count)/secs*10)) / 10
}

// sampleBefore resets the broker's peak RSS and samples it; measured is
// false when there is no broker process or /proc cannot be read.
func sampleBefore(pids []int) (ProcSample, bool) {
	if len(pids) == 0 {
		return ProcSample{}, false
	}
	for _, pid := range pids {
		ResetPeakRSS(pid) // best effort: without it peak RSS covers the process's life
	}
	s, err := sampleProcs(pids)
	return s, err == nil
}

// sampleProcs is SampleProc of every process, summed: a cluster's nodes
// together (their peak RSS is the sum of each one's peak).
func sampleProcs(pids []int) (ProcSample, error) {
	var sum ProcSample
	for _, pid := range pids {
		s, err := SampleProc(pid)
		if err != nil {
			return ProcSample{}, err
		}
		sum.At = s.At
		sum.CPU += s.CPU
		sum.RSS += s.RSS
		sum.PeakRSS += s.PeakRSS
		sum.CtxSwitches += s.CtxSwitches
		sum.WriteBytes += s.WriteBytes
		sum.OpenFiles += s.OpenFiles
	}
	return sum, nil
}
