package appliance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fibril-edge/fibril/wal"
)

// Options configure a broker. Zero fields take the documented defaults.
type Options struct {
	// DataDir holds the metadata store (meta/) and the queue logs
	// (queues/<name>/<partition>/). Required.
	DataDir string
	// FS is the file system for the logs and the metadata store. Default
	// vfs.Default; tests pass pebble's crashable in-memory FS.
	FS vfs.FS
	// Logger receives the broker's logs. Default slog.Default().
	Logger *slog.Logger
	// SegmentSize of every queue log. Default 16 MiB. Segments reserve
	// their space in steps as they fill (wal.Options.PreallocAhead), so
	// an idle partition holds 256 KiB on disk, not a segment.
	SegmentSize int64
	// TailCacheBytes per partition log. Default 1 MiB: small devices first.
	TailCacheBytes int64
	// ReadCacheBytes budgets the node's read cache, one for every
	// partition log (wal.ReadCache): the blocks leaving the partitions'
	// tail windows while a reader trails them, for readers that fall
	// behind their writers. Default 32 MiB; negative turns it off.
	ReadCacheBytes int64
	// SyncGroup, if set, is the node's group in which the partition logs
	// that sync at the same moment share one sync of their file system
	// (wal.SyncGroup); the caller closes it after the broker. Default nil:
	// every partition log syncs its own file.
	SyncGroup *wal.SyncGroup
	// ScrubBytesPerSecond is the rate at which each partition log checks
	// its sealed segments in the background after it opens, quarantining
	// damaged records it finds. Default wal.DefaultScrubBytesPerSecond
	// (8 MiB/s, shared by nothing: one scrub per log); negative turns the
	// scrub off.
	ScrubBytesPerSecond int64
	// MaxMessageBytes caps one message body. Default 4 MiB.
	MaxMessageBytes int
	// DiskBudgetBytes caps what the data directory may hold; publishes past
	// it are refused with ErrDiskFull. Default 0: no budget.
	DiskBudgetBytes int64
	// MinFreeBytes refuses publishes once the file system holding the data
	// directory has less free space than this. Default 64 MiB; negative
	// turns the watermark off.
	MinFreeBytes int64
	// CheckpointDelay is how long after a change a partition's checkpoint
	// runs. Default 30 s. Idle partitions never checkpoint.
	CheckpointDelay time.Duration
	// Observer, if set, sees publishes, deliveries and log syncs as they
	// happen (see Observer). Default nil: nothing is observed.
	Observer Observer
	// Replication, when set, gates every partition's applies on its copies
	// (a cluster node). Default nil: a solo broker.
	Replication Replication
	// ProgressInterval is how often Open logs its progress while it is
	// still recovering queues (which queue, how many of how many). Default
	// 2 s; negative turns the progress lines off.
	ProgressInterval time.Duration
	// LogDir, when set, names the directory of a partition's log instead
	// of DataDir/queues/<queue>/<partition> (a cluster node keeps the logs
	// it owns beside its copies of other nodes', so a copy becomes the
	// owner's log, and back, without moving). DeleteQueue then leaves the
	// logs to the caller. Default nil.
	LogDir func(queue string, partition int) string
}

// DefaultReadCacheBytes is the node's read cache when Options leave it 0.
const DefaultReadCacheBytes = 32 << 20

func (o Options) withDefaults() Options {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = 16 << 20
	}
	if o.TailCacheBytes == 0 {
		o.TailCacheBytes = 1 << 20
	}
	if o.ReadCacheBytes == 0 {
		o.ReadCacheBytes = DefaultReadCacheBytes
	}
	if o.ScrubBytesPerSecond == 0 {
		o.ScrubBytesPerSecond = wal.DefaultScrubBytesPerSecond
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = 4 << 20
	}
	if o.MinFreeBytes == 0 {
		o.MinFreeBytes = 64 << 20
	}
	if o.CheckpointDelay == 0 {
		o.CheckpointDelay = 30 * time.Second
	}
	if o.ProgressInterval == 0 {
		o.ProgressInterval = 2 * time.Second
	}
	return o
}

// Broker is the solo broker: declared queues, each a set of partition logs,
// with declarations, settings and snapshots in Pebble.
type Broker struct {
	opts     Options
	log      *slog.Logger
	meta     *metaStore
	cache    *wal.ReadCache // the node's read cache; nil when off
	settings atomic.Pointer[Settings]
	nextTag  atomic.Uint64 // delivery tags: a per-process counter
	disk     diskGuard

	mu     sync.RWMutex // guards queues, failed and closed
	queues map[string]*queue
	failed map[string]error // queues that could not be opened
	closed bool

	ckptMu    sync.Mutex // guards ckptDirty and ckptTimer
	ckptDirty map[*partition]struct{}
	ckptTimer *time.Timer

	// bg counts the broker's short-lived goroutines (dead-letter copies,
	// duplicate confirms) and the deletions under way; Close waits for
	// them once the queues are closed.
	bg sync.WaitGroup
}

// Open opens the broker in opts.DataDir, recovering every declared queue:
// each partition loads its snapshot and replays its log after it. A queue
// that cannot be opened is reported (QueueErrors) and the broker starts
// without it.
func Open(opts Options) (*Broker, error) {
	if opts.DataDir == "" {
		return nil, fmt.Errorf("%w: no data directory", ErrInvalid)
	}
	opts = opts.withDefaults()
	b := &Broker{
		opts: opts, log: opts.Logger,
		queues: make(map[string]*queue), failed: make(map[string]error),
		ckptDirty: make(map[*partition]struct{}),
	}
	b.disk = diskGuard{fs: opts.FS, dir: opts.DataDir, budget: opts.DiskBudgetBytes, minFree: opts.MinFreeBytes, log: opts.Logger}
	if err := wal.MkdirAllSynced(opts.FS, opts.DataDir); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	b.disk.openReserve() // reserve.go: room to free space on a full disk
	meta, err := openMeta(opts.FS.PathJoin(opts.DataDir, "meta"), opts.FS)
	if err != nil {
		return nil, err
	}
	b.meta = meta
	meta.room = b.disk.metaRoom
	s := DefaultSettings()
	if _, err := meta.getJSON(settingsKey, &s); err != nil {
		_ = meta.close()
		return nil, err
	}
	b.settings.Store(&s)
	cfgs, err := meta.queues()
	if err == nil && b.solo() {
		cfgs, err = b.checkLogs(cfgs) // declfile.go
	}
	if err != nil {
		_ = meta.close()
		return nil, err
	}
	if opts.ReadCacheBytes > 0 {
		if b.cache, err = wal.NewReadCache(opts.ReadCacheBytes); err != nil {
			_ = meta.close()
			return nil, err
		}
	}
	progress := b.startProgress(len(cfgs))
	for _, cfg := range cfgs {
		progress.opening(cfg.Name)
		q, err := b.openQueue(cfg)
		if err != nil {
			b.failed[cfg.Name] = err
			b.log.Error("queue could not be opened; serving the others", "queue", cfg.Name, "err", err)
			continue
		}
		b.queues[cfg.Name] = q
	}
	progress.stop()
	return b, nil
}

// openProgress logs, every ProgressInterval while Open recovers queues,
// which queue it is on and how many it has done: a long start (a queue
// with many unsettled messages) says what it is doing. Its goroutine owns
// nothing; the queue being opened is handed over atomically.
type openProgress struct {
	current atomic.Pointer[string]
	done    atomic.Int64
	quit    chan struct{}
	exited  chan struct{}
}

func (b *Broker) startProgress(total int) *openProgress {
	p := &openProgress{quit: make(chan struct{}), exited: make(chan struct{})}
	if b.opts.ProgressInterval < 0 || total == 0 {
		close(p.exited)
		return p
	}
	start := time.Now()
	go func() {
		defer close(p.exited)
		tick := time.NewTicker(b.opts.ProgressInterval)
		defer tick.Stop()
		for {
			select {
			case <-p.quit:
				if took := time.Since(start); took >= b.opts.ProgressInterval {
					b.log.Info("queues recovered", "queues", total, "took", took.Round(time.Millisecond))
				}
				return
			case <-tick.C:
				name := ""
				if cur := p.current.Load(); cur != nil {
					name = *cur
				}
				b.log.Info("recovering queues", "queue", name, "done", p.done.Load(), "of", total,
					"elapsed", time.Since(start).Round(time.Second))
			}
		}
	}()
	return p
}

// opening notes that the queue before name (if any) is done.
func (p *openProgress) opening(name string) {
	if p.current.Load() != nil {
		p.done.Add(1)
	}
	p.current.Store(&name)
}

func (p *openProgress) stop() {
	select {
	case <-p.exited:
	default:
		close(p.quit)
		<-p.exited
	}
}

// DeclareResult is a declare's reply.
type DeclareResult struct {
	Config  QueueConfig // the declaration in effect
	Created bool
	Warning string // the loss-window warning for buffered queues
}

// Declare creates a queue or confirms an existing one. The mode is fixed by
// the first declare: naming the other mode fails with ErrModeConflict, and
// naming none keeps it.
func (b *Broker) Declare(ctx context.Context, c QueueConfig) (DeclareResult, error) {
	if err := c.Validate(); err != nil {
		return DeclareResult{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return DeclareResult{}, ErrClosed
	}
	if err, ok := b.failed[c.Name]; ok {
		return DeclareResult{}, fmt.Errorf("%w: queue %s failed to open: %w", ErrUnavailable, c.Name, err)
	}
	if q, ok := b.queues[c.Name]; ok {
		merged, err := q.cfg().Merge(c)
		if err != nil {
			return DeclareResult{}, err
		}
		if old := *q.cfg(); merged != old {
			if err := b.saveDeclaration(merged); err != nil {
				return DeclareResult{}, err
			}
			q.config.Store(&merged)
			if !old.hasLimits() && merged.hasLimits() {
				// Acks that went out without a sync of their own
				// (boundaryFor) count against the new limits until
				// applied: sync them now, as a limited queue's acks sync.
				for _, p := range q.parts {
					p.syncSettles()
				}
			}
		}
		return declareResult(merged, false), nil
	}
	if err := b.refuseOrphan(c.Name); err != nil {
		return DeclareResult{}, err
	}
	cfg := c.WithDefaults()
	// The disk budget and the free-space watermark must have room for a
	// segment per partition before anything is created: a segment
	// reserves its space in steps, but a queue that cannot fill one is
	// of no use.
	if err := b.disk.check(int64(cfg.Partitions) * b.opts.SegmentSize); err != nil {
		return DeclareResult{}, fmt.Errorf("declare %s: %d first segments of %d bytes: %w",
			cfg.Name, cfg.Partitions, b.opts.SegmentSize, err)
	}
	if err := b.meta.putQueue(cfg); err != nil {
		return DeclareResult{}, err
	}
	if b.solo() {
		if err := writeQueueFile(b.opts.FS, b.queueDir(cfg.Name), cfg); err != nil {
			return DeclareResult{}, errors.Join(err, b.undoDeclare(cfg.Name))
		}
	}
	q, err := b.openQueue(cfg)
	if err != nil {
		return DeclareResult{}, errors.Join(err, b.undoDeclare(cfg.Name))
	}
	b.queues[cfg.Name] = q
	b.log.Info("queue declared", "queue", cfg.Name, "durability", cfg.Durability, "partitions", cfg.Partitions)
	return declareResult(cfg, true), nil
}

// undoDeclare removes what a declare that failed to open its queue left:
// its declaration and, on a solo broker, its logs (a cluster's logs are
// the cluster's to remove). A failed declare leaves nothing behind that
// a restart would show as a failed queue.
func (b *Broker) undoDeclare(name string) error {
	if b.solo() {
		if err := b.removeQueueLogs(name); err != nil {
			return fmt.Errorf("undo the declaration of %s: %w", name, err)
		}
		return nil
	}
	if err := b.meta.deleteQueue(name); err != nil {
		return fmt.Errorf("undo the declaration of %s: %w", name, err)
	}
	return nil
}

func declareResult(c QueueConfig, created bool) DeclareResult {
	r := DeclareResult{Config: c, Created: created}
	if c.Durability == Buffered {
		r.Warning = BufferedWarning
	}
	return r
}

// DeleteQueue closes a queue and removes its logs, declaration and
// snapshots. Subscriptions on it stop receiving, and their Ended is
// called.
func (b *Broker) DeleteQueue(ctx context.Context, name string) error {
	if err := b.disk.metaRoom(true); err != nil { // before the queue closes: nothing half done
		return fmt.Errorf("delete queue %s: %w", name, err)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	q, ok := b.queues[name]
	_, failed := b.failed[name]
	if !ok && !failed {
		b.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	delete(b.queues, name)
	delete(b.failed, name)
	b.bg.Add(1) // Close waits for the deletion before it closes the metadata store
	defer b.bg.Done()
	b.mu.Unlock()
	if q != nil {
		ended, err := q.close(b)
		if err != nil {
			b.log.Warn("closing a deleted queue", "queue", name, "err", err)
		}
		for _, s := range ended {
			if s.ended != nil {
				s.ended()
			}
		}
	}
	if !b.solo() && !b.keptAsSolo(name) {
		if err := b.meta.deleteQueue(name); err != nil {
			return err
		}
		b.log.Info("queue deleted; its logs stay for the cluster", "queue", name)
		return nil
	}
	if err := b.removeQueueLogs(name); err != nil {
		return fmt.Errorf("delete queue %s: %w", name, err)
	}
	b.log.Info("queue deleted", "queue", name)
	return nil
}

func (b *Broker) queue(name string) (*queue, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return nil, ErrClosed
	}
	q, ok := b.queues[name]
	if !ok {
		if err, failed := b.failed[name]; failed {
			return nil, fmt.Errorf("%w: queue %s failed to open: %w", ErrUnavailable, name, err)
		}
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return q, nil
}

// PublishAsync publishes m and calls done once it is confirmed at the
// queue's durability (or failed). done runs on the goroutine that applies
// the partition's appends: a broker goroutine, or, for a publish written
// and applied at once, the caller's own before PublishAsync returns,
// together with the callbacks of the publishes batched with it. It must
// not block: the partition applies nothing else while it runs.
// PublishAsync keeps nothing of m.Body once it returns (the body is
// copied into the log record): the caller may reuse its memory.
func (b *Broker) PublishAsync(queueName string, m Message, done func(Confirm, error)) {
	b.publishAsync(queueName, m, done, nil)
}

// publishAsync is PublishAsync, holding the append for pub when it is set.
func (b *Broker) publishAsync(queueName string, m Message, done func(Confirm, error), pub *Publisher) {
	q, err := b.queue(queueName)
	if err != nil {
		done(Confirm{}, err)
		return
	}
	if len(m.Body) > b.opts.MaxMessageBytes {
		done(Confirm{}, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(m.Body), b.opts.MaxMessageBytes))
		return
	}
	if err := checkEncodable(m); err != nil {
		done(Confirm{}, err)
		return
	}
	now := time.Now()
	if obs := b.opts.Observer; obs != nil {
		inner, mode := done, q.cfg().Durability
		done = func(c Confirm, err error) {
			obs.Published(queueName, mode, time.Since(now), err)
			inner(c, err)
		}
	}
	q.publish(m, now, done, pub)
}

// Publish publishes m and waits for its confirm.
func (b *Broker) Publish(ctx context.Context, queueName string, m Message) (Confirm, error) {
	type result struct {
		c   Confirm
		err error
	}
	ch := make(chan result, 1)
	b.PublishAsync(queueName, m, func(c Confirm, err error) { ch <- result{c, err} })
	select {
	case r := <-ch:
		return r.c, r.err
	case <-ctx.Done():
		if status := b.replicaStatus(queueName); status != "" {
			return Confirm{}, fmt.Errorf("publish to %s not confirmed in time, waiting for copies (%s): %w", queueName, status, ctx.Err())
		}
		return Confirm{}, ctx.Err()
	}
}

// replicaStatus describes what a cluster queue's confirms wait for; ""
// for a solo queue.
func (b *Broker) replicaStatus(queueName string) string {
	q, err := b.queue(queueName)
	if err != nil {
		return ""
	}
	var parts []string
	for _, p := range q.parts {
		if p.gate != nil {
			parts = append(parts, fmt.Sprintf("partition %d: %s", p.idx, p.gate.Status()))
		}
	}
	return strings.Join(parts, "; ")
}

// publishDeadLetter copies a message into a dead-letter queue, declaring it
// (durable, by default) if it does not exist yet.
func (b *Broker) publishDeadLetter(name string, m Message) (Confirm, error) {
	if _, err := b.queue(name); errors.Is(err, ErrNotFound) && !b.solo() {
		// A cluster declares a dead-letter queue with its queue; served by
		// another node now, the copy goes there.
		if fw, ok := b.opts.Replication.(Forwarder); ok {
			type result struct {
				cf  Confirm
				err error
			}
			ch := make(chan result, 1)
			if fw.Forward(name, m, func(cf Confirm, err error) { ch <- result{cf, err} }) {
				r := <-ch
				return r.cf, r.err
			}
		}
		return Confirm{}, fmt.Errorf("%w: dead-letter queue %s is served by no node", ErrUnavailable, name)
	}
	if _, err := b.queue(name); errors.Is(err, ErrNotFound) {
		if _, err := b.Declare(context.Background(), QueueConfig{Name: name}); err != nil {
			return Confirm{}, err
		}
	}
	// The copy keeps the message's id: consumers of the dead-letter queue
	// see which message it was, and a copy made twice (the copy confirmed,
	// the marker here not) is a repeat the dead-letter queue's dedupe
	// window can drop.
	return b.Publish(context.Background(), name, m)
}

// Subscribe attaches a consumer to every partition of a queue.
func (b *Broker) Subscribe(queueName string, o SubscribeOptions) (*Subscription, error) {
	q, err := b.queue(queueName)
	if err != nil {
		return nil, err
	}
	if o.Deliver == nil {
		return nil, fmt.Errorf("%w: subscription without a Deliver function", ErrInvalid)
	}
	if o.Prefetch < 0 {
		return nil, fmt.Errorf("%w: prefetch %d", ErrInvalid, o.Prefetch)
	}
	if o.Prefetch == 0 {
		o.Prefetch = DefaultPrefetch
	}
	s := &Subscription{q: q, deliver: o.Deliver, ended: o.Ended, credit: o.Prefetch, held: make(map[uint64]*partition)}
	q.subsMu.Lock()
	q.subs[s] = struct{}{}
	q.subsMu.Unlock()
	for _, p := range q.parts {
		p.addSub(s)
	}
	return s, nil
}

// QueueNames lists the open queues, sorted.
func (b *Broker) QueueNames() []string {
	b.mu.RLock()
	defer b.mu.RUnlock()
	names := make([]string, 0, len(b.queues))
	for n := range b.queues {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// QueueErrors returns the queues that failed to open, with why.
func (b *Broker) QueueErrors() map[string]error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make(map[string]error, len(b.failed))
	for k, v := range b.failed {
		out[k] = v
	}
	return out
}

// Closed reports whether Close has been called.
func (b *Broker) Closed() bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.closed
}

// ReadCache returns the node's read cache's counters: all zero when it is
// off (Options.ReadCacheBytes negative).
func (b *Broker) ReadCache() wal.ReadCacheStats {
	if b.cache == nil {
		return wal.ReadCacheStats{}
	}
	return b.cache.Stats()
}

// Close stops admission, checkpoints and syncs every partition, closes the
// logs and the metadata store.
func (b *Broker) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	queues := b.queues
	b.queues = map[string]*queue{}
	b.mu.Unlock()
	b.ckptMu.Lock()
	if b.ckptTimer != nil {
		b.ckptTimer.Stop()
	}
	b.ckptMu.Unlock()
	// The queues close checkpointWorkers at a time, so that their
	// checkpoints' syncs are shared (checkpoint.go) and their logs' last
	// syncs overlap: a shutdown with many queues does not pay each one's
	// syncs in a row.
	list := slices.Collect(maps.Values(queues))
	errs := inParallel(len(list), func(i int) error {
		_, err := list[i].close(b)
		return err
	})
	b.bg.Wait() // what they publish or settle now fails as closed
	if b.cache != nil {
		b.cache.Close()
	}
	errs = append(errs, b.meta.close())
	return errors.Join(errs...)
}
