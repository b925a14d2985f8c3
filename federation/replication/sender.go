package replication

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/fibril-edge/fibril/wal"
)

// Sender defaults.
const (
	DefaultMaxBatchBytes = 1 << 20
	// DefaultCatchUpLag: a follower further behind than this many records
	// is catching up through the pull path, one synced batch per Pull.
	DefaultCatchUpLag = 4096
	// DefaultRetry is the first reconnect delay; it doubles up to maxRetry.
	DefaultRetry = 50 * time.Millisecond
	// DefaultHelloTimeout bounds the wait for the follower's answer to a
	// Hello (it may wait for its control state to catch up first).
	DefaultHelloTimeout = 30 * time.Second
)

// SenderOptions configure one owner-to-follower stream.
type SenderOptions struct {
	// Hello opens each connection; its Head and End are filled in from Log.
	Hello Hello
	// Follower is the follower's id, as the gate knows it.
	Follower string
	// Addr is the follower's cluster address.
	Addr string
	// Dial opens a replication connection to addr.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// Log is the owner's copy; Gate receives the follower's positions.
	Log  *wal.Log
	Gate *Gate
	// MaxBatchBytes bounds a batch; default DefaultMaxBatchBytes.
	MaxBatchBytes int
	// CatchUpLag: the stream catches up through pulls while it is more
	// than this many records behind the owner's written end, or below what
	// the owner's tail cache holds; default DefaultCatchUpLag.
	CatchUpLag uint64
	// Retry is the first reconnect delay; default DefaultRetry.
	Retry time.Duration
	// HelloTimeout bounds the wait for the follower's answer to each
	// connection's Hello; past it the stream reconnects. Default
	// DefaultHelloTimeout.
	HelloTimeout time.Duration
	Logger       *slog.Logger
}

// SenderStats count a stream's batches since its sender started.
type SenderStats struct {
	PushBatches    uint64 // sent as records were written (early replication)
	CatchUpBatches uint64 // sent on the catch-up path, each appended synced
	Pulls          uint64 // catch-up Pulls answered
	CatchingUp     bool   // the stream is catching up now
	// Refusals counts handshakes the follower refused; LastRefusal is the
	// newest reason while the follower refuses (such as a copy that
	// diverged), "" once a handshake is accepted again.
	Refusals    uint64
	LastRefusal string
}

// Sender pushes a partition's records to one follower as soon as they are
// written (early replication), lets a follower that is far behind catch
// up through pulls, and feeds the follower's positions to the gate. It
// reconnects with backoff until closed.
type Sender struct {
	o      SenderOptions
	cancel context.CancelFunc
	done   chan struct{}

	pushBatches, catchUpBatches, pulls atomic.Uint64
	catchingUp                         atomic.Bool
	refusals                           atomic.Uint64
	lastRefusal                        atomic.Pointer[string]
}

// StartSender starts the stream's goroutine.
func StartSender(o SenderOptions) *Sender {
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if o.CatchUpLag == 0 {
		o.CatchUpLag = DefaultCatchUpLag
	}
	if o.Retry <= 0 {
		o.Retry = DefaultRetry
	}
	if o.HelloTimeout <= 0 {
		o.HelloTimeout = DefaultHelloTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Logger = o.Logger.With("queue", o.Hello.Queue, "partition", o.Hello.Partition, "follower", o.Follower)
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sender{o: o, cancel: cancel, done: make(chan struct{})}
	go s.run(ctx)
	return s
}

// Close stops the stream and waits for it.
func (s *Sender) Close() {
	s.cancel()
	<-s.done
}

// Stats returns the stream's counters.
func (s *Sender) Stats() SenderStats {
	st := SenderStats{PushBatches: s.pushBatches.Load(), CatchUpBatches: s.catchUpBatches.Load(),
		Pulls: s.pulls.Load(), CatchingUp: s.catchingUp.Load(), Refusals: s.refusals.Load()}
	if r := s.lastRefusal.Load(); r != nil {
		st.LastRefusal = *r
	}
	return st
}

// maxRetry caps the delay between a stream's reconnects: a follower that
// restarted is fed again within it, and until then its copy is not live
// (live.go), so a recovery of a buffered queue could not count it.
const maxRetry = time.Second

func (s *Sender) run(ctx context.Context) {
	defer close(s.done)
	delay := s.o.Retry
	for {
		began := time.Now()
		err := s.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > maxRetry {
			delay = s.o.Retry // it streamed a while: a new failure starts over
		}
		s.o.Logger.Warn("replication stream ended; reconnecting", "err", err, "in", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, maxRetry)
	}
}

// stream runs one connection: hello, then batches from the follower's
// position, while a reader goroutine passes positions to the gate and
// pulls to the sending loop.
func (s *Sender) stream(ctx context.Context) error {
	c, err := s.o.Dial(ctx, s.o.Addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	defer c.Close()
	// A follower that never answers the Hello must not hold the stream:
	// its gate position would stay where it was for good.
	c.SetDeadline(time.Now().Add(s.o.HelloTimeout))
	w := bufio.NewWriterSize(c, recordBuffer) // see Follower.Serve
	hello := s.o.Hello
	hello.Head, hello.End = s.o.Log.Head(), s.o.Log.WrittenNext()
	if _, err := w.Write(appendFrame(nil, hello)); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	br := bufio.NewReaderSize(c, answerBuffer)
	fr, err := readFrame(br)
	if err != nil {
		return fmt.Errorf("read the follower's answer to the hello (within %v): %w", s.o.HelloTimeout, err)
	}
	c.SetDeadline(time.Time{})
	pos, ok := fr.(Position)
	if !ok {
		reason := fmt.Sprint(fr)
		if r, isRefuse := fr.(Refuse); isRefuse {
			reason = r.Reason
		}
		s.lastRefusal.Store(&reason)
		s.refusals.Add(1)
		return fmt.Errorf("follower refused: %s", reason)
	}
	// The follower answers with its position only once its copy is a
	// prefix of this log (it checked the Hello's history); the gate counts
	// it only past the checks here as well.
	if pos.Written > s.o.Log.WrittenNext() {
		return fmt.Errorf("follower holds %d records past the owner's end %d (part of recovery, not of streaming)",
			pos.Written-s.o.Log.WrittenNext(), pos.Written)
	}
	if head := s.o.Log.Head(); pos.Written < head {
		return fmt.Errorf("follower at %d is behind the owner's head %d", pos.Written, head)
	}
	s.lastRefusal.Store(nil) // taken again: nothing refused now
	s.o.Gate.Update(s.o.Follower, pos)
	readErr := make(chan error, 1)
	pulls := make(chan Pull, 1)
	go func() {
		readErr <- s.readFollower(br, pulls)
		cancel()
	}()
	err = s.send(ctx, w, pos.Written, pulls)
	cancel()
	if rerr := <-readErr; rerr != nil {
		if errors.Is(err, context.Canceled) {
			err = rerr // the reader ended the stream: its error says why
		} else {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// readFollower passes positions to the gate and pulls to the sending
// loop, which answers one at a time.
func (s *Sender) readFollower(br *bufio.Reader, pulls chan<- Pull) error {
	for {
		fr, err := readFrame(br)
		if err != nil {
			return err
		}
		switch f := fr.(type) {
		case Position:
			s.o.Gate.Update(s.o.Follower, f)
		case Pull:
			// Everything before From is synced on the follower.
			s.o.Gate.Update(s.o.Follower, Position{Written: f.From, Durable: f.From})
			select {
			case pulls <- f:
			default:
				return fmt.Errorf("%w: pull at %d while one is unanswered", ErrFrame, f.From)
			}
		case Refuse:
			return fmt.Errorf("follower refused: %s", f.Reason)
		default:
			return fmt.Errorf("%w: unexpected %T from follower", ErrFrame, fr)
		}
	}
}

// send streams records from cursor on. Near the written end it pushes,
// waiting at the written frontier; behind it, it sends one catch-up batch
// and then one more in answer to each Pull.
func (s *Sender) send(ctx context.Context, w *bufio.Writer, cursor uint64, pulls <-chan Pull) error {
	var buf []byte
	pullOwed := false // a catch-up batch went out; its Pull has not come
	sentHead := uint64(0)
	for {
		maxBytes := s.o.MaxBatchBytes
		if pullOwed {
			var p Pull
			select {
			case p = <-pulls:
			case <-ctx.Done():
				return ctx.Err()
			}
			if p.From != cursor {
				return fmt.Errorf("%w: pull from %d, the stream is at %d", ErrFrame, p.From, cursor)
			}
			if p.Max > 0 {
				maxBytes = min(maxBytes, int(p.Max))
			}
			s.pulls.Add(1)
			pullOwed = false
		}
		if s.o.Log.WrittenNext() <= cursor {
			if _, err := s.o.Log.WaitWritten(ctx, cursor+1); err != nil {
				return err
			}
		}
		catchUp := s.behind(cursor)
		s.noteMode(catchUp, cursor)
		recs, err := s.o.Log.ReadWritten(cursor, maxBytes)
		if err != nil {
			return fmt.Errorf("read owner log at %d: %w", cursor, err)
		}
		if len(recs) == 0 {
			continue
		}
		if recs[0].Offset != cursor {
			return fmt.Errorf("owner log read at %d returned %d", cursor, recs[0].Offset)
		}
		if head := s.o.Log.Head(); head > sentHead { // retention moved: the follower follows
			buf = appendFrame(buf[:0], Head{Offset: head})
			if _, err := w.Write(buf); err != nil {
				return err
			}
			sentHead = head
		}
		b := Batch{First: cursor, CatchUp: catchUp, Records: make([]Record, len(recs))}
		for i, r := range recs {
			b.Records[i] = Record{Type: r.Type, Payload: r.Payload}
		}
		buf = appendFrame(buf[:0], b)
		// Counted before it is written: a batch larger than w's buffer
		// goes out in Write, and the follower's answer may come (and a
		// caller look at the counts) before Write returns.
		if catchUp {
			s.catchUpBatches.Add(1)
		} else {
			s.pushBatches.Add(1)
		}
		if _, err := w.Write(buf); err != nil {
			return err
		}
		cursor += uint64(len(recs))
		pullOwed = catchUp
		// Flush a catch-up batch (the follower waits for it) and a push
		// batch that caught up; otherwise let the buffer gather batches.
		if catchUp || s.o.Log.WrittenNext() <= cursor || w.Buffered() > 32<<10 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
}

// behind says whether a stream at cursor catches up rather than pushes:
// more than CatchUpLag records behind the written end, or below the
// owner's tail cache, where every read goes to the segment files.
func (s *Sender) behind(cursor uint64) bool {
	if s.o.Log.WrittenNext()-cursor > s.o.CatchUpLag {
		return true
	}
	from, ok := s.o.Log.CachedFrom()
	return ok && cursor < from
}

// noteMode records and logs a switch between push and catch-up.
func (s *Sender) noteMode(catchUp bool, cursor uint64) {
	if s.catchingUp.Swap(catchUp) == catchUp {
		return
	}
	if catchUp {
		s.o.Logger.Info("follower is behind; catching up through pulls", "at", cursor, "written", s.o.Log.WrittenNext())
	} else {
		s.o.Logger.Info("follower caught up; pushing", "at", cursor)
	}
}
