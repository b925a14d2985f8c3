package client

import (
	"errors"
	"fmt"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// The writer goroutine owns the wire.Writer. Each turn it writes what is
// queued on out (up to drainBatch frames), then the batched settles and
// the frames the reader queued, then Goodbye if one is due and nothing
// registered before it is still on its way, and flushes. When it has sent
// nothing for sendIdle it sends a Heartbeat; its one timer re-arms for the
// rest of the interval instead of being reset on every write.

func (cn *conn) writeLoop() {
	defer cn.wg.Done()
	var tick <-chan time.Time
	var hb *time.Timer
	if cn.sendIdle > 0 {
		hb = time.NewTimer(cn.sendIdle)
		defer hb.Stop()
		tick = hb.C
	}
	lastSent := time.Now()
	for {
		select {
		case it := <-cn.out:
			if err := cn.writeOut(it); err != nil {
				cn.fail(err)
				return
			}
		drain:
			for n := 1; n < drainBatch; n++ {
				select {
				case it := <-cn.out:
					if err := cn.writeOut(it); err != nil {
						cn.fail(err)
						return
					}
				default:
					break drain
				}
			}
		case <-cn.wake:
		case <-tick:
			if idle := time.Since(lastSent); idle < cn.sendIdle {
				hb.Reset(cn.sendIdle - idle)
				continue
			}
			if err := cn.w.WriteFrame(&wire.Heartbeat{}); err != nil {
				cn.fail(err)
				return
			}
			hb.Reset(cn.sendIdle)
		case <-cn.done:
			return
		}
		bye, err := cn.writePending(true)
		if err == nil && cn.w.Buffered() > 0 {
			err = cn.w.Flush()
			lastSent = time.Now()
		}
		if err != nil {
			cn.fail(err)
			return
		}
		if bye {
			cn.mu.Lock()
			peer := cn.peerGoodbye
			cn.mu.Unlock()
			if peer { // we answered the broker's Goodbye: close
				cn.fail(errors.New("client: broker said goodbye"))
			}
			return // nothing is sent after Goodbye
		}
	}
}

// writeOut writes one queued frame. A frame the Writer refuses (too large,
// invalid) fails its request only; an I/O error is returned.
func (cn *conn) writeOut(it outFrame) error {
	if _, ok := it.f.(*wire.Unsubscribe); ok {
		// The broker applies settles read before an Unsubscribe.
		if _, err := cn.writePending(false); err != nil {
			return err
		}
	}
	err := cn.w.WriteFrame(it.f)
	if err != nil && errors.Is(err, wire.ErrProtocol) {
		cn.complete(it.corr, nil, fmt.Errorf("%w: %w", ErrInvalid, err))
		return nil
	}
	return err
}

// writePending writes the batched settles, the control frames and, if
// asked for and mayClose, Goodbye (after everything else). It reports
// whether Goodbye went out.
func (cn *conn) writePending(mayClose bool) (bool, error) {
	cn.mu.Lock()
	groups := cn.settles.take()
	control := cn.control
	cn.control = nil
	// Goodbye goes last: after every request registered before it.
	bye := mayClose && cn.wantGoodbye && !cn.goodbyeSent && cn.enqueuing == 0 && len(cn.out) == 0
	peer := cn.peerGoodbye
	if bye {
		cn.goodbyeSent = true
	}
	cn.mu.Unlock()

	for _, f := range settleFrames(groups, cn.maxFrame) {
		if err := cn.w.WriteFrame(f); err != nil {
			return false, err
		}
	}
	for _, f := range control {
		if err := cn.w.WriteFrame(f); err != nil {
			return false, err
		}
	}
	if bye {
		reason := "client closing"
		if peer {
			reason = "answering goodbye"
		}
		if err := cn.w.WriteFrame(&wire.Goodbye{Reason: reason}); err != nil {
			return false, err
		}
	}
	return bye, nil
}
