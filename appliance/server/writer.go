package server

import (
	"errors"
	"net"
	"time"

	"github.com/fibril-edge/fibril/appliance/wire"
)

// deadlineWriter gives every write to the connection WriteTimeout to make
// progress.
type deadlineWriter struct {
	nc      net.Conn
	timeout time.Duration
}

func (w deadlineWriter) Write(p []byte) (int, error) {
	if err := w.nc.SetWriteDeadline(time.Now().Add(w.timeout)); err != nil {
		return 0, err
	}
	return w.nc.Write(p)
}

// runWriter writes queued frames, flushing whenever the queue is empty,
// and sends a Heartbeat after HelloOK whenever it has sent nothing for the
// heartbeat interval.
func (c *conn) runWriter() {
	defer close(c.writerDone)
	defer c.out.release() // what is still queued will never be written
	defer c.recoverPanic("writer")
	w := wire.NewWriter(deadlineWriter{nc: c.nc, timeout: c.s.opts.WriteTimeout}, wire.Options{MaxFrame: c.s.opts.MaxFrame})
	hb := c.s.opts.Heartbeat
	var tick *time.Timer
	var tickC <-chan time.Time
	defer func() {
		if tick != nil {
			tick.Stop()
		}
	}()
	for {
		select {
		case <-c.out.ready:
		case <-tickC:
			if !c.write(w, &wire.Heartbeat{}) || !c.flush(w) {
				return
			}
			tick.Reset(hb)
			continue
		case <-c.done:
			return
		}
		for fs := c.out.take(); len(fs) > 0; fs = c.out.take() {
			for _, f := range fs {
				if f.delivery {
					if !c.writeDelivery(w, f) {
						return
					}
					continue
				}
				if f.frame != nil && !c.write(w, f.frame) {
					return
				}
				if ok, isOK := f.frame.(*wire.HelloOK); isOK {
					w.SetVersion(ok.Version) // the frames after it are in that version's layout
					if hb > 0 {
						tick = time.NewTimer(hb)
						tickC = tick.C
					}
				}
				if f.closing {
					if c.flush(w) {
						c.closeWrite()
					}
					return
				}
			}
		}
		if !c.flush(w) {
			return
		}
		if tick != nil {
			tick.Reset(hb)
		}
	}
}

// writeDelivery writes a Deliver frame, unless the connection is shedding
// its deliveries, and counts it out of the delivery budget.
func (c *conn) writeDelivery(w *wire.Writer, f outFrame) bool {
	ok := c.shed.Load() || c.write(w, f.frame)
	c.out.sent(f.size)
	if ok && c.paused.Load() {
		c.s.written(c)
	}
	return ok
}

// write adds f to the writer's buffer. A frame the writer refuses (it
// would break the protocol) is logged and skipped; a failed write closes
// the connection and returns false.
func (c *conn) write(w *wire.Writer, f wire.Frame) bool {
	err := w.WriteFrame(f)
	switch {
	case err == nil:
		return true
	case errors.Is(err, wire.ErrProtocol):
		c.log.Error("frame not sent: it breaks the protocol", "frame", f.Type(), "err", err)
		return true
	}
	c.writeFailed(err)
	return false
}

func (c *conn) flush(w *wire.Writer) bool {
	if err := w.Flush(); err != nil {
		c.writeFailed(err)
		return false
	}
	return true
}

func (c *conn) writeFailed(err error) {
	select {
	case <-c.done:
	default:
		c.log.Debug("write failed; closing", "err", err)
	}
	c.close()
}
