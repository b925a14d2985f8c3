package replication

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/fibril-edge/fibril/wal"
)

// Sender defaults.
const (
	DefaultMaxBatchBytes = 1 << 20
	// DefaultCatchUpLag: a follower further behind than this many records
	// is catching up, reading what the owner's tail cache no longer holds;
	// its batches are appended synced.
	DefaultCatchUpLag = 4096
	// DefaultRetry is the first reconnect delay; it doubles up to 5 s.
	DefaultRetry = 50 * time.Millisecond
)

// SenderOptions configure one owner-to-follower stream.
type SenderOptions struct {
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
	// CatchUpLag; default DefaultCatchUpLag.
	CatchUpLag uint64
	// Retry is the first reconnect delay; default DefaultRetry.
	Retry  time.Duration
	Logger *slog.Logger
}

// Sender pushes a partition's records to one follower as soon as they are
// written (early replication), and feeds the follower's positions to the
// gate. It reconnects with backoff until closed.
type Sender struct {
	o      SenderOptions
	cancel context.CancelFunc
	done   chan struct{}
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

func (s *Sender) run(ctx context.Context) {
	defer close(s.done)
	delay := s.o.Retry
	for {
		err := s.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		s.o.Logger.Warn("replication stream ended; reconnecting", "err", err, "in", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// stream runs one connection: hello, then batches from the follower's
// position, while a reader goroutine passes positions to the gate.
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
	w := bufio.NewWriterSize(c, 64<<10)
	if _, err := w.Write(appendFrame(nil, s.o.Hello)); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	br := bufio.NewReader(c)
	fr, err := readFrame(br)
	if err != nil {
		return fmt.Errorf("read hello reply: %w", err)
	}
	pos, ok := fr.(Position)
	if !ok {
		return fmt.Errorf("follower refused: %v", fr)
	}
	s.o.Gate.Update(s.o.Follower, pos)
	if pos.Written > s.o.Log.WrittenNext() {
		return fmt.Errorf("follower holds %d records past the owner's end %d (part of recovery, not of streaming)",
			pos.Written-s.o.Log.WrittenNext(), pos.Written)
	}
	if head := s.o.Log.Head(); pos.Written < head {
		return fmt.Errorf("follower at %d is behind the owner's head %d", pos.Written, head)
	}
	readErr := make(chan error, 1)
	go func() {
		readErr <- s.readPositions(br)
		cancel()
	}()
	err = s.send(ctx, w, pos.Written)
	cancel()
	if rerr := <-readErr; rerr != nil && !errors.Is(err, context.Canceled) {
		err = errors.Join(err, rerr)
	}
	return err
}

func (s *Sender) readPositions(br *bufio.Reader) error {
	for {
		fr, err := readFrame(br)
		if err != nil {
			return err
		}
		switch f := fr.(type) {
		case Position:
			s.o.Gate.Update(s.o.Follower, f)
		case Refuse:
			return fmt.Errorf("follower refused: %s", f.Reason)
		default:
			return fmt.Errorf("%w: unexpected %T from follower", ErrFrame, fr)
		}
	}
}

// send streams records from cursor on, waiting at the written frontier.
func (s *Sender) send(ctx context.Context, w *bufio.Writer, cursor uint64) error {
	var buf []byte
	for {
		if s.o.Log.WrittenNext() <= cursor {
			if _, err := s.o.Log.WaitWritten(ctx, cursor+1); err != nil {
				return err
			}
		}
		recs, err := s.o.Log.ReadWritten(cursor, s.o.MaxBatchBytes)
		if err != nil {
			return fmt.Errorf("read owner log at %d: %w", cursor, err)
		}
		if len(recs) == 0 {
			continue
		}
		if recs[0].Offset != cursor {
			return fmt.Errorf("owner log read at %d returned %d", cursor, recs[0].Offset)
		}
		b := Batch{First: cursor, Sync: s.o.Log.WrittenNext()-cursor > s.o.CatchUpLag, Records: make([]Record, len(recs))}
		for i, r := range recs {
			b.Records[i] = Record{Type: r.Type, Payload: r.Payload}
		}
		buf = appendFrame(buf[:0], b)
		if _, err := w.Write(buf); err != nil {
			return err
		}
		cursor += uint64(len(recs))
		// Flush when caught up; otherwise let the buffer gather batches.
		if s.o.Log.WrittenNext() <= cursor || w.Buffered() > 32<<10 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
}

// Senders is a set of streams closed together.
type Senders struct {
	mu sync.Mutex
	s  []*Sender
}

// Add starts a stream and keeps it for Close.
func (ss *Senders) Add(o SenderOptions) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.s = append(ss.s, StartSender(o))
}

// Close stops every stream.
func (ss *Senders) Close() {
	ss.mu.Lock()
	s := ss.s
	ss.s = nil
	ss.mu.Unlock()
	for _, x := range s {
		x.Close()
	}
}
