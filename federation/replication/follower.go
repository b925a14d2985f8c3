package replication

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/wal"
)

// DefaultPullBytes bounds the catch-up batch a follower Pulls.
const DefaultPullBytes = 1 << 20

// helloReadTimeout bounds the wait for a stream's Hello: a connection
// that sends none holds nothing for long.
const helloReadTimeout = 10 * time.Second

// FollowerOptions configure a Follower.
type FollowerOptions struct {
	// Dir holds one log per replicated partition:
	// Dir/<queue>/<incarnation>/<partition>.
	Dir string
	// FS is the file system; default vfs.Default.
	FS vfs.FS
	// SegmentSize of replica logs; default the log's default.
	SegmentSize int64
	// SyncGroup, if set, is the node's group in which the logs that sync
	// at the same moment share one sync of their file system
	// (wal.SyncGroup); default nil, each copy syncs its own file.
	SyncGroup *wal.SyncGroup
	// BackgroundSyncInterval of replica logs; default the log's default,
	// negative turns the timer off (pushed records of buffered queues then
	// sync at the log's byte bound, or with the next synced append).
	// SetBackgroundSyncInterval changes it live.
	BackgroundSyncInterval time.Duration
	// PullBytes bounds each catch-up batch the follower asks for; default
	// DefaultPullBytes (the owner may send less).
	PullBytes int
	// Accept, when set, decides whether a stream may feed this node's
	// copy of the partition its Hello names; an error refuses the stream
	// with the error as the reason. It is called before the copy is
	// opened and may wait (for the control state to catch up); ctx ends
	// when the Follower closes. Default: every Hello is accepted.
	Accept func(ctx context.Context, h Hello) error
	// Keep, when set, reports whether this node still keeps the copy:
	// Collect removes the copies it rejects, and a copy it rejects is
	// not opened. It must not block. Default: every copy is kept.
	Keep func(c CopyID) bool
	// InUse, when set, reports whether a copy Keep rejects is still in use
	// outside the Follower (the broker's open log on the queue's owner):
	// Collect leaves it for a later collection. It must not block.
	// Default: none is.
	InUse func(c CopyID) bool
	// PeerID, when set, names the node at the other end of a stream (from
	// its verified certificate; ok false without one): a stream is taken
	// only from the owner its Hello names. Default: no check.
	PeerID func(net.Conn) (id string, ok bool)
	// Continuity, when set, returns the token that tells a restart of the
	// process from a power loss for a copy's directory (live.go); ""
	// means unknown. Default: the kernel's boot id and the directory's
	// mount id, on the operating system's file system only.
	Continuity func(dir string) string
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Follower keeps this node's copies of partitions other nodes own. Each
// copy is a wal.Log written at the owner's offsets; one stream at a time
// feeds it (a new stream from the owner replaces the old one). A
// partition has at most one open copy, of one incarnation of its queue.
type Follower struct {
	opts   FollowerOptions
	ctx    context.Context // ends at Close: Accept stops waiting
	cancel context.CancelFunc

	// mu guards replicas, live, opened, closed and interval; a copy is opened,
	// and one that is not open is removed, under it (see copies.go).
	mu       sync.Mutex
	opened   map[CopyID]bool // copies opened since TakeOpened
	replicas map[string]*replica
	live     map[CopyID]liveness // live.go
	closed   bool
	interval time.Duration  // the copies' background sync interval
	wg       sync.WaitGroup // streams and removals under way
}

// NewFollower returns a Follower storing under o.Dir.
func NewFollower(o FollowerOptions) *Follower {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.PullBytes <= 0 || o.PullBytes > MaxFrame/2 {
		o.PullBytes = DefaultPullBytes
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Follower{opts: o, ctx: ctx, cancel: cancel, replicas: map[string]*replica{}, opened: map[CopyID]bool{},
		live: map[CopyID]liveness{}, interval: o.BackgroundSyncInterval}
}

// SetBackgroundSyncInterval changes the background sync interval of every
// copy, open now or opened later; zero or negative turns it off.
func (f *Follower) SetBackgroundSyncInterval(d time.Duration) error {
	if d <= 0 {
		d = -1
	}
	f.mu.Lock()
	f.interval = d
	logs := make([]*wal.Log, 0, len(f.replicas))
	for _, r := range f.replicas {
		logs = append(logs, r.log)
	}
	f.mu.Unlock()
	var errs []error
	for _, l := range logs {
		if err := l.SetBackgroundSyncInterval(d); err != nil && !errors.Is(err, wal.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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
	// A node holds a stream per partition it follows, idle or not: the
	// buffers stay small (the records' frames are read through one the
	// size of a page; the answers, Positions, are a few bytes each).
	br := bufio.NewReaderSize(c, recordBuffer)
	w := &frameWriter{w: bufio.NewWriterSize(c, answerBuffer)}
	c.SetReadDeadline(time.Now().Add(helloReadTimeout))
	fr, err := readFrame(br)
	if err != nil {
		return
	}
	c.SetReadDeadline(time.Time{})
	h, ok := fr.(Hello)
	if !ok {
		w.send(Refuse{Reason: "expected hello"})
		return
	}
	if f.opts.PeerID != nil {
		if id, ok := f.opts.PeerID(c); ok && id != h.Owner {
			f.opts.Logger.Warn("replication stream refused: the peer's certificate names another node",
				"queue", h.Queue, "partition", h.Partition, "claimed_owner", h.Owner, "certificate", id)
			w.send(Refuse{Reason: fmt.Sprintf("the certificate names node %q, not the owner %q", id, h.Owner)})
			return
		}
	}
	if f.opts.Accept != nil {
		if err := f.opts.Accept(f.ctx, h); err != nil {
			f.opts.Logger.Warn("replication stream refused", "queue", h.Queue, "partition", h.Partition,
				"incarnation", h.Incarnation, "owner", h.Owner, "err", err)
			w.send(Refuse{Reason: err.Error()})
			return
		}
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
	if err := f.startAtHead(r, h); err != nil {
		f.opts.Logger.Error("replica cannot follow", "queue", h.Queue, "partition", h.Partition, "err", err)
		w.send(Refuse{Reason: err.Error()})
		return
	}
	if err := f.adoptHistory(r, h); err != nil {
		f.opts.Logger.Error("replica cannot follow", "queue", h.Queue, "partition", h.Partition, "err", err)
		w.send(Refuse{Reason: err.Error()})
		return
	}
	log := r.log // startAtHead or adoptHistory may have cut it back and reopened it
	dir := f.copyDir(r.id)
	if to, ok, err := catchUpTarget(f.opts.FS, dir); err == nil && ok && to == catchUpUnknown {
		if err := MarkCatchUp(f.opts.FS, dir, h.End); err != nil {
			w.send(Refuse{Reason: err.Error()})
			return
		}
	}
	if h.Durability == appliance.Durable && log.DurableNext() < log.WrittenNext() {
		// A durable queue's copy holds its records synced: what it wrote
		// under the buffered rule (the queue's mode changed, or a stream
		// of the buffered queue it was) is synced before it reports.
		// Bounded: a stream whose copy cannot sync gives up and the owner
		// dials again, rather than handlers piling up behind a stuck disk.
		sctx, cancel := context.WithTimeout(f.ctx, helloSyncTimeout)
		err := log.Sync(sctx)
		cancel()
		if err != nil {
			w.send(Refuse{Reason: fmt.Sprintf("sync the copy before following a durable queue: %v", err)})
			return
		}
	}
	hello := Position{Written: log.WrittenNext(), Durable: log.DurableNext()}
	r.ack(hello.Written)
	if err := w.send(hello); err != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	completions := make(chan pendingAppend, 256)
	var pullOwed atomic.Bool // a catch-up batch is appending; its Pull is not sent yet
	var wg sync.WaitGroup
	wg.Add(4)
	go func() { defer wg.Done(); f.checkAppends(c, w, completions, &pullOwed) }()
	go func() { defer wg.Done(); f.liveAt(ctx, r.id, log, h.End) }()
	go func() { defer wg.Done(); f.watch(ctx, w, r, log, hello, false, "") }()
	go func() { defer wg.Done(); f.watch(ctx, w, r, log, hello, true, dir) }()
	// On return: no more appends, stop the watcher, wait for both.
	defer wg.Wait()
	defer cancel()
	defer close(completions)
	next := log.WrittenNext()
	var ownerHead uint64 // the owner's head as it last said
	for {
		fr, err := readFrame(br)
		if err != nil {
			return
		}
		if hd, ok := fr.(Head); ok {
			ownerHead = max(ownerHead, hd.Offset)
			retain(log, ownerHead, h, f.opts.Logger)
			continue
		}
		retain(log, ownerHead, h, f.opts.Logger) // the copy may have synced further since
		b, ok := fr.(Batch)
		if !ok {
			w.send(Refuse{Reason: "expected batch"})
			return
		}
		if pullOwed.Load() {
			w.send(Refuse{Reason: fmt.Sprintf("batch at %d before the pull for the last catch-up batch", b.First)})
			return
		}
		if b.First > next {
			w.send(Refuse{Reason: fmt.Sprintf("gap: batch starts at %d, the copy ends at %d", b.First, next)})
			return
		}
		skip := next - b.First // records the copy has already
		if skip >= uint64(len(b.Records)) {
			if b.CatchUp {
				// Its Pull would ask for records the owner did not send.
				w.send(Refuse{Reason: fmt.Sprintf("catch-up batch %d to %d is behind the copy's end %d",
					b.First, b.First+uint64(len(b.Records)), next)})
				return
			}
			continue
		}
		entries := make([]wal.Entry, 0, len(b.Records)-int(skip))
		for _, rec := range b.Records[skip:] {
			entries = append(entries, wal.Entry{Type: rec.Type, Payload: rec.Payload})
		}
		d := wal.AfterFlush
		if h.Durability == appliance.Durable || b.CatchUp {
			d = wal.AfterFsync
		}
		pullOwed.Store(b.CatchUp)
		// The owner's batch may be larger than one append of the copy can
		// be; the Pull waits for the last part.
		parts := splitBatch(entries, log.MaxBatchBytes())
		for i, part := range parts {
			a := pendingAppend{comp: log.AppendAsync(part, d), pull: b.CatchUp && i == len(parts)-1}
			select {
			case completions <- a:
			case <-ctx.Done():
				return
			}
		}
		next += uint64(len(entries))
	}
}

// retain follows the owner's retention: the copy drops what lies below
// the owner's head, never past what it has synced itself.
func retain(log *wal.Log, ownerHead uint64, h Hello, logger *slog.Logger) {
	if to := min(ownerHead, log.DurableNext()); to > log.Head() {
		if err := log.AdvanceHead(to); err != nil {
			logger.Warn("replica retention failed", "queue", h.Queue, "partition", h.Partition, "err", err)
		}
	}
}

// splitBatch cuts entries into runs of at most limit segment bytes (a
// record alone over it stays alone, for the log to refuse).
func splitBatch(entries []wal.Entry, limit int64) [][]wal.Entry {
	var parts [][]wal.Entry
	start, size := 0, int64(0)
	for i, e := range entries {
		n := int64(wal.RecordSize(len(e.Payload)))
		if i > start && size+n > limit {
			parts = append(parts, entries[start:i])
			start, size = i, 0
		}
		size += n
	}
	return append(parts, entries[start:])
}

// ErrDiverged refuses a stream whose owner's log does not hold the copy's
// records when the owner's epoch is not above the copy's last record's:
// the copy holds records of an owner instance past where the owner's
// history ends that instance. The copy's position is not reported, so the
// owner's gate never counts it.
var ErrDiverged = errors.New("replication: copy diverged from the owner's log")

// adoptHistory checks, before the copy's position is reported, that the
// copy is a prefix of the owner's log as the Hello's history describes
// it, and records that the records it takes from here on are the owner's
// (history.go). The history is saved, synced, before any of them is
// appended.
//
// A copy that diverges from an owner of a newer epoch than its last
// record is cut back to where it diverges (crash safe, wal.CutBack) and
// catches up from there: the control state installed that owner at that
// epoch from the best history of the sealed witnesses, which holds every
// confirmed record, so what the copy holds past it was never confirmed.
// (Raft's followers drop a conflicting suffix the same way; Kafka's
// truncate to the end of the last epoch they share with the new leader.)
func (f *Follower) adoptHistory(r *replica, h Hello) error {
	dir := f.copyDir(r.id)
	have, err := LoadHistory(f.opts.FS, dir)
	if err != nil {
		return err
	}
	start, end := r.log.Head(), r.log.WrittenNext()
	owner := h.History.Start(0)
	if at := ConsistentEnd(have, start, end, owner); at < end {
		if last := have.Start(start).LastEpoch(end); h.Epoch <= last {
			return fmt.Errorf("%w at offset %d: the copy holds %d records there that the owner's log does not",
				ErrDiverged, at, end-at)
		}
		f.opts.Logger.Warn("replica diverged from the new owner's log; cutting it back", "queue", h.Queue,
			"partition", h.Partition, "owner", h.Owner, "epoch", h.Epoch, "at", at, "dropped", end-at)
		if err := f.cutBack(r, at); err != nil {
			return fmt.Errorf("cut the diverged replica back to %d: %w", at, err)
		}
		start, end = r.log.Head(), r.log.WrittenNext()
		if end > at {
			return fmt.Errorf("the replica ends at %d after its cut back to %d", end, at)
		}
	}
	adopted := have.Start(start).Adopt(owner, end)
	if slices.Equal(adopted, have) {
		return nil
	}
	return SaveHistory(f.opts.FS, dir, adopted)
}

// startAtHead moves a copy that ends before the owner's head up to it:
// the owner's retention removed every record the copy lacks, so the
// stream cannot bring it up to date record by record. An empty copy (a
// new follower of a queue whose first records retention has removed) is
// moved at once. A copy holding records, all before the head (a follower
// that was down while the owner's retention passed it), is rebuilt: it is
// marked as catching up first, so it is no witness until it holds the
// owner's end as of this Hello (seal.go), then its records are dropped
// (wal.CutBack, crash safe) and it starts empty at the head, to be filled
// from the owner's log like a new copy. The records it drops are ones the
// owner removed as settled: the queue's state from the head on is in the
// log from the head on (retention keeps what a rebuild needs, the dedupe
// window's ids included), so the copy needs nothing below it.
func (f *Follower) startAtHead(r *replica, h Hello) error {
	end := r.log.WrittenNext()
	if end >= h.Head {
		return nil
	}
	if start := r.log.Head(); start != end {
		dir := f.copyDir(r.id)
		if err := MarkCatchUp(f.opts.FS, dir, catchUpUnknown); err != nil {
			return fmt.Errorf("mark the copy holding records %d to %d, before the owner's head %d, as catching up: %w",
				start, end, h.Head, err)
		}
		// A cut to 0 leaves no segment behind (the first may start below
		// the head, which is not persisted), and an empty log at 0, which
		// Rebase then moves to the head.
		if err := f.cutBack(r, 0); err != nil {
			return fmt.Errorf("drop the copy's records %d to %d, before the owner's head %d: %w", start, end, h.Head, err)
		}
		if r.log.Head() != r.log.WrittenNext() {
			return fmt.Errorf("the copy holds records %d to %d after dropping those before the owner's head %d",
				r.log.Head(), r.log.WrittenNext(), h.Head)
		}
		f.opts.Logger.Warn("replica ended before the owner's head; rebuilding it from the head", "queue", h.Queue,
			"partition", h.Partition, "dropped_from", start, "dropped_to", end, "head", h.Head)
	}
	from := r.log.WrittenNext()
	if err := r.log.Rebase(context.Background(), h.Head); err != nil {
		return fmt.Errorf("start the empty copy at the owner's head %d: %w", h.Head, err)
	}
	f.opts.Logger.Info("empty replica starts at the owner's head", "queue", h.Queue, "partition", h.Partition,
		"from", from, "head", h.Head)
	return nil
}

// pendingAppend is one append of the stream; pull says it holds a
// catch-up batch, whose Pull follows once it is synced.
type pendingAppend struct {
	comp *wal.Completion
	pull bool
}

// checkAppends waits for the appends in order and sends the Pull that
// follows each synced catch-up batch; a failed append ends the stream
// (the copy's log has latched).
func (f *Follower) checkAppends(c net.Conn, w *frameWriter, appends <-chan pendingAppend, pullOwed *atomic.Bool) {
	for a := range appends {
		<-a.comp.Done()
		res, err := a.comp.Result()
		if err != nil {
			f.opts.Logger.Error("replica append failed; closing the stream", "err", err)
			w.send(Refuse{Reason: "append failed: " + err.Error()})
			c.Close()
			for range appends {
			}
			return
		}
		if a.pull {
			// AfterFsync completed: everything before res.Next is
			// durable, and nothing follows it until this Pull is answered.
			pullOwed.Store(false)
			w.send(Pull{From: res.Next, Max: uint32(f.opts.PullBytes)})
		}
	}
}

// helloSyncTimeout bounds the sync a durable queue's stream starts with.
const helloSyncTimeout = 30 * time.Second

// watch reports the copy's position whenever one frontier moves (the
// durable one when durable is set, else the written one): written as soon
// as records reach the operating system, durable when a sync completes,
// each in its own field, whatever the queue's mode.
//
// Every written end it reports is first recorded as r's acknowledged end
// (replica.acked): the owner's gate counts it, whatever the log's written
// end later falls back to.
//
// The durable watcher also clears a catch-up marker in catchUpDir once the
// copy is durable as far as it says (seal.go).
func (f *Follower) watch(ctx context.Context, w *frameWriter, r *replica, log *wal.Log, sent Position, durable bool, catchUpDir string) {
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
		if catchUpDir != "" {
			if done, err := caughtUp(f.opts.FS, catchUpDir, p.Durable); err != nil {
				f.opts.Logger.Warn("replica's catch-up marker not cleared", "dir", catchUpDir, "err", err)
			} else if done {
				catchUpDir = ""
			}
		}
		r.ack(p.Written)
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
	f.cancel()
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
	f.mu.Lock()
	defer f.mu.Unlock()
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
