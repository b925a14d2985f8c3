package replication

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fibril-edge/fibril/wal"
)

// durableMode is appliance.Durable's value in Hello.Durability.
const durableMode = 1

// FollowerOptions configure a Follower.
type FollowerOptions struct {
	// Dir holds one log per replicated partition: Dir/<queue>/<partition>.
	Dir string
	// FS is the file system; default vfs.Default.
	FS vfs.FS
	// SegmentSize of replica logs; default the log's default.
	SegmentSize int64
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Follower keeps this node's copies of partitions other nodes own. Each
// copy is a wal.Log written at the owner's offsets; one stream at a time
// feeds it (a new stream from the owner replaces the old one).
type Follower struct {
	opts FollowerOptions

	mu       sync.Mutex // guards replicas and closed
	replicas map[string]*replica
	closed   bool
	wg       sync.WaitGroup
}

type replica struct {
	log *wal.Log
	// stream is the connection feeding the copy, and done closes when its
	// handler has returned; both guarded by Follower.mu.
	stream net.Conn
	done   chan struct{}
}

// NewFollower returns a Follower storing under o.Dir.
func NewFollower(o FollowerOptions) *Follower {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Follower{opts: o, replicas: map[string]*replica{}}
}

func replicaKey(queue string, partition uint32) string {
	return queue + "/" + strconv.FormatUint(uint64(partition), 10)
}

// Log returns the copy of a partition, if this node has one.
func (f *Follower) Log(queue string, partition int) (*wal.Log, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.replicas[replicaKey(queue, uint32(partition))]
	if !ok {
		return nil, false
	}
	return r.log, true
}

// attach opens (or finds) the copy named by h and makes c its stream,
// ending the previous stream first.
func (f *Follower) attach(h Hello, c net.Conn) (*replica, chan struct{}, error) {
	key := replicaKey(h.Queue, h.Partition)
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, nil, errors.New("follower closed")
	}
	r, ok := f.replicas[key]
	if !ok {
		dir := f.opts.FS.PathJoin(f.opts.Dir, h.Queue, strconv.FormatUint(uint64(h.Partition), 10))
		log, err := wal.Open(dir, wal.Options{FS: f.opts.FS, SegmentSize: f.opts.SegmentSize,
			Logger: f.opts.Logger.With("replica", key)})
		if err != nil {
			f.mu.Unlock()
			return nil, nil, fmt.Errorf("open replica %s: %w", key, err)
		}
		r = &replica{log: log}
		f.replicas[key] = r
	}
	for r.stream != nil {
		old, done := r.stream, r.done
		f.mu.Unlock()
		old.Close()
		<-done
		f.mu.Lock()
	}
	done := make(chan struct{})
	r.stream, r.done = c, done
	f.mu.Unlock()
	return r, done, nil
}

func (f *Follower) detach(r *replica, done chan struct{}) {
	f.mu.Lock()
	if r.done == done {
		r.stream, r.done = nil, nil
	}
	f.mu.Unlock()
	close(done)
}

// Serve runs one replication stream on c until it ends.
func (f *Follower) Serve(c net.Conn) {
	defer c.Close()
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.wg.Add(1)
	f.mu.Unlock()
	defer f.wg.Done()
	br := bufio.NewReaderSize(c, 64<<10)
	w := &frameWriter{w: bufio.NewWriter(c)}
	fr, err := readFrame(br)
	if err != nil {
		return
	}
	h, ok := fr.(Hello)
	if !ok {
		w.send(Refuse{Reason: "expected hello"})
		return
	}
	r, done, err := f.attach(h, c)
	if err != nil {
		w.send(Refuse{Reason: err.Error()})
		return
	}
	defer f.detach(r, done)
	if ep := r.log.Epoch(); h.Epoch < ep {
		w.send(Refuse{Reason: fmt.Sprintf("stale epoch %d: the copy is sealed at %d", h.Epoch, ep)})
		return
	}
	log := r.log
	hello := Position{Written: log.WrittenNext(), Durable: log.DurableNext()}
	if err := w.send(hello); err != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	completions := make(chan *wal.Completion, 256)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); f.checkAppends(c, w, completions) }()
	go func() { defer wg.Done(); f.watch(ctx, w, log, hello, false) }()
	go func() { defer wg.Done(); f.watch(ctx, w, log, hello, true) }()
	// On return: no more appends, stop the watcher, wait for both.
	defer wg.Wait()
	defer cancel()
	defer close(completions)
	next := log.WrittenNext()
	for {
		fr, err := readFrame(br)
		if err != nil {
			return
		}
		b, ok := fr.(Batch)
		if !ok {
			w.send(Refuse{Reason: "expected batch"})
			return
		}
		if b.First > next {
			w.send(Refuse{Reason: fmt.Sprintf("gap: batch starts at %d, the copy ends at %d", b.First, next)})
			return
		}
		skip := next - b.First // records the copy has already
		if skip >= uint64(len(b.Records)) {
			continue
		}
		entries := make([]wal.Entry, 0, len(b.Records)-int(skip))
		for _, rec := range b.Records[skip:] {
			entries = append(entries, wal.Entry{Type: rec.Type, Payload: rec.Payload})
		}
		d := wal.AfterFlush
		if h.Durability == durableMode || b.Sync {
			d = wal.AfterFsync
		}
		select {
		case completions <- log.AppendAsync(entries, d):
		case <-ctx.Done():
			return
		}
		next += uint64(len(entries))
	}
}

// checkAppends waits for the appends in order; a failed one ends the
// stream (the copy's log has latched).
func (f *Follower) checkAppends(c net.Conn, w *frameWriter, completions <-chan *wal.Completion) {
	for comp := range completions {
		<-comp.Done()
		if _, err := comp.Result(); err != nil {
			f.opts.Logger.Error("replica append failed; closing the stream", "err", err)
			w.send(Refuse{Reason: "append failed: " + err.Error()})
			c.Close()
			for range completions {
			}
			return
		}
	}
}

// watch reports the copy's position whenever one frontier moves (the
// durable one when durable is set, else the written one): written as soon
// as records reach the operating system, durable when a sync completes,
// each in its own field, whatever the queue's mode.
func (f *Follower) watch(ctx context.Context, w *frameWriter, log *wal.Log, sent Position, durable bool) {
	pick := func(p Position) uint64 {
		if durable {
			return p.Durable
		}
		return p.Written
	}
	last := pick(sent)
	for {
		var err error
		if durable {
			_, err = log.WaitDurable(ctx, last+1)
		} else {
			_, err = log.WaitWritten(ctx, last+1)
		}
		if err != nil {
			return
		}
		p := Position{Written: log.WrittenNext(), Durable: log.DurableNext()}
		if err := w.send(p); err != nil {
			return
		}
		// Wait past what was sent, not past a fresh read: a move between
		// the two would otherwise go unreported.
		last = pick(p)
	}
}

// Close ends every stream and closes the copies.
func (f *Follower) Close() error {
	f.mu.Lock()
	f.closed = true
	var streams []net.Conn
	for _, r := range f.replicas {
		if r.stream != nil {
			streams = append(streams, r.stream)
		}
	}
	f.mu.Unlock()
	for _, c := range streams {
		c.Close()
	}
	f.wg.Wait()
	var errs []error
	for _, r := range f.replicas {
		errs = append(errs, r.log.Close())
	}
	return errors.Join(errs...)
}

// frameWriter serialises frames from several goroutines onto one
// connection.
type frameWriter struct {
	mu  sync.Mutex
	w   *bufio.Writer
	buf []byte
}

func (fw *frameWriter) send(f Frame) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	fw.buf = appendFrame(fw.buf[:0], f)
	if _, err := fw.w.Write(fw.buf); err != nil {
		return err
	}
	return fw.w.Flush()
}
