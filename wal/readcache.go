package wal

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/dgraph-io/ristretto/v2"
)

// ReadCache is one cache of log records for a whole node, shared by every
// log handed it (Options.ReadCache), with one memory budget. It holds the
// blocks leaving the logs' tail windows while a reader trails them, so a
// reader that trails its writer past the tail window (a consumer behind, a
// follower catching up, an uplink replaying) is served from memory. A log
// takes its blocks out again once its readers have passed them. (Blocks a
// reader reads from a segment file are not offered: a log cannot tell its
// readers apart, so it cannot know that another one is behind the reader
// and will read them again, and a wrong guess fills the cache with blocks
// read once; see docs/decisions.md.) It is a ristretto cache: one of them costs a few hundred KiB of
// fixed buffers whatever its budget, so a node has one, never one per log.
//
// Blocks are copied in when they enter and never change after, and a log
// keys its blocks with a generation that no other log, and no later open
// of the same directory, shares: a reader never meets another log's
// records, nor records this log has since declared lost.
//
// Logs hand blocks in and out without waiting: one goroutine copies them
// in and takes them out, and an offer that finds it busy is dropped (it is
// a cache). A log's writer never waits on it.
type ReadCache struct {
	c    *ristretto.Cache[uint64, *cachedBlock]
	ops  chan cacheOp
	done chan struct{} // closed when the goroutine has stopped

	mu     sync.RWMutex // guards closed against the sends on ops and the reads of c
	closed bool

	hits, misses     atomic.Uint64 // records served from the cache, and read past it
	offered, refused atomic.Uint64 // blocks offered, and blocks turned away or dropped
}

// cacheOp is a block to put in or take out, or (flush) a wait for what
// was handed in before it.
type cacheOp struct {
	gen, id uint64
	recs    *[tailBlockLen]Record // read-only; nil: take the block out
	flush   chan struct{}
}

// cachedBlock holds the records of the tailBlockLen offsets of block id of
// generation gen that were written (Type 0 where not), their payloads in
// one buffer of the block's own.
type cachedBlock struct {
	gen, id uint64
	recs    [tailBlockLen]Record
}

// cacheBlockOverhead is what a block costs beside its records' payloads.
const cacheBlockOverhead = 16 + tailBlockLen*int64(unsafe.Sizeof(Record{}))

// ReadCacheStats are a read cache's counters since it was made.
type ReadCacheStats struct {
	Budget  int64  // bytes
	Held    int64  // bytes of blocks held now
	Hits    uint64 // records served from the cache
	Misses  uint64 // records a log read past it from its segment files
	Offered uint64 // blocks offered to it
	Refused uint64 // blocks it turned away: its admission policy, or busy
}

// HitRatio is Hits over Hits plus Misses, 0 before any read.
func (s ReadCacheStats) HitRatio() float64 {
	if s.Hits+s.Misses == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Hits+s.Misses)
}

// NewReadCache makes a read cache of budget bytes (at least 1 MiB) and
// starts its goroutine; Close stops it.
func NewReadCache(budget int64) (*ReadCache, error) {
	budget = max(budget, 1<<20)
	r := &ReadCache{ops: make(chan cacheOp, 1024), done: make(chan struct{})}
	// Blocks are of 64 records: a budget holds about budget/4 KiB of them
	// for small records; ristretto counts ten times the items it holds.
	c, err := ristretto.NewCache(&ristretto.Config[uint64, *cachedBlock]{
		NumCounters:        max(budget/400, 1000),
		MaxCost:            budget,
		BufferItems:        64,
		IgnoreInternalCost: true,
		OnReject:           func(*ristretto.Item[*cachedBlock]) { r.refused.Add(1) },
	})
	if err != nil {
		return nil, fmt.Errorf("wal: read cache of %d bytes: %w", budget, err)
	}
	r.c = c
	go r.run()
	return r, nil
}

// Close stops the cache's goroutine and frees it. Logs still using it read
// past it from then on.
func (r *ReadCache) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	close(r.ops)
	r.mu.Unlock()
	<-r.done
	r.c.Close()
}

// Stats returns the cache's counters.
func (r *ReadCache) Stats() ReadCacheStats {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s := ReadCacheStats{
		Hits: r.hits.Load(), Misses: r.misses.Load(),
		Offered: r.offered.Load(), Refused: r.refused.Load(),
	}
	if !r.closed {
		s.Budget, s.Held = r.c.MaxCost(), r.c.MaxCost()-r.c.RemainingCost()
	}
	return s
}

// run carries out the puts and takes, in the order handed in.
func (r *ReadCache) run() {
	defer close(r.done)
	for op := range r.ops {
		switch {
		case op.flush != nil:
			r.c.Wait()
			close(op.flush)
		case op.recs == nil:
			r.c.Del(r.key(op.gen, op.id))
		default:
			r.put(op.gen, op.id, op.recs)
		}
	}
}

// wait returns once every block handed in so far has been admitted or
// turned away.
func (r *ReadCache) wait() {
	flush := make(chan struct{})
	r.mu.RLock()
	if r.closed {
		r.mu.RUnlock()
		return
	}
	r.ops <- cacheOp{flush: flush}
	r.mu.RUnlock()
	<-flush
}

// hand gives the goroutine op without waiting; false when it is busy or
// the cache closed.
func (r *ReadCache) hand(op cacheOp) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return false
	}
	select {
	case r.ops <- op:
		return true
	default:
		return false
	}
}

// offer hands in block id of generation gen: recs holds the records of
// its offsets that are known (Type 0 elsewhere), and must not change from
// now on.
func (r *ReadCache) offer(gen, id uint64, recs *[tailBlockLen]Record) {
	r.offered.Add(1)
	if !r.hand(cacheOp{gen: gen, id: id, recs: recs}) {
		r.refused.Add(1)
	}
}

// takeOut hands in the removal of block id of generation gen.
func (r *ReadCache) takeOut(gen, id uint64) { r.hand(cacheOp{gen: gen, id: id}) }

// cacheGens hands every open of a log, and every range it declares lost,
// a generation of its own.
var cacheGens atomic.Uint64

func nextCacheGen() uint64 { return cacheGens.Add(1) }

// key mixes a generation and a block id into ristretto's key (its sketch
// and shards take the key's low bits as they are, so they must vary with
// both); the block keeps both, so two that mix alike are told apart on
// the way out.
func (r *ReadCache) key(gen, id uint64) uint64 {
	x := gen<<40 ^ id // splitmix64's finalizer
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// block returns block id of generation gen if the cache holds it.
func (r *ReadCache) block(gen, id uint64) *cachedBlock {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return nil
	}
	b, ok := r.c.Get(r.key(gen, id))
	if !ok || b.gen != gen || b.id != id {
		return nil
	}
	return b
}

// put copies the payloads of recs (see offer) into one buffer, with what
// the cache holds of the block already, and sets the block. On the cache's
// goroutine.
func (r *ReadCache) put(gen, id uint64, recs *[tailBlockLen]Record) {
	all := *recs
	if old, ok := r.c.Get(r.key(gen, id)); ok && old.gen == gen && old.id == id {
		for i, rec := range old.recs {
			if all[i].Type == 0 {
				all[i] = rec
			}
		}
	}
	size, held := 0, false
	for _, rec := range all {
		size += len(rec.Payload)
		held = held || rec.Type != 0
	}
	if !held {
		return
	}
	b := &cachedBlock{gen: gen, id: id}
	buf := make([]byte, 0, size)
	for i, rec := range all {
		if rec.Type != 0 {
			at := len(buf)
			buf = append(buf, rec.Payload...)
			rec.Payload = buf[at:len(buf):len(buf)]
			b.recs[i] = rec
		}
	}
	if !r.c.Set(r.key(gen, id), b, cacheBlockOverhead+int64(size)) {
		r.refused.Add(1)
	}
}

// The log's side: which blocks it hands the read cache, and when it takes
// them out.

// fromReadCache returns offset's record from the node's read cache after
// checking it. *blk is the block the last call found, looked up again only
// when offset leaves it.
func (l *Log) fromReadCache(blk **cachedBlock, offset uint64) (Record, bool) {
	rc := l.opts.ReadCache
	if rc == nil {
		return Record{}, false
	}
	gen, id := l.cacheGen.Load(), offset>>tailBlockShift
	if b := *blk; b == nil || b.gen != gen || b.id != id {
		if *blk = rc.block(gen, id); *blk == nil {
			return Record{}, false
		}
	}
	rec := (*blk).recs[offset&(tailBlockLen-1)]
	return rec, rec.Type != 0 && rec.Offset == offset
}

// noteRead lowers readLow to a read's first offset.
func (l *Log) noteRead(from uint64) {
	for {
		low := l.readLow.Load()
		if from >= low || l.readLow.CompareAndSwap(low, from) {
			return
		}
	}
}

// leaveTail is handed the blocks the tail cache drops at once, on the
// writer's goroutine, and starts a new span of reads. A block goes to the
// read cache only if a read since the last drop was at or below its first
// offset: that reader trails the whole tail window and will read the block
// next. Readers closer to the writer (consumers keeping up, the
// replication stream) will not read it again, and offering every block of
// every log would churn the read cache past what the readers that trail
// need from it. (The reads since the last drop go back about a block, the
// drops' spacing, so a reader at the writer has read below the end of the
// block dropped, never below its start.)
//
// Blocks this log offered that every reader since the last drop has
// passed are taken out again: read, they would otherwise hold the room
// the next blocks need.
func (l *Log) leaveTail(gone []goneBlock) {
	rc, gen := l.opts.ReadCache, l.cacheGen.Load()
	low := l.readLow.Swap(math.MaxUint64)
	if low != math.MaxUint64 {
		l.offered = slices.DeleteFunc(l.offered, func(id uint64) bool {
			if (id+1)<<tailBlockShift > low {
				return false
			}
			rc.takeOut(gen, id)
			return true
		})
	}
	for _, g := range gone {
		if low <= g.id<<tailBlockShift {
			rc.offer(gen, g.id, &g.b.recs)
			l.remember(g.id)
		}
	}
}

// maxOffered bounds the blocks a log remembers offering: past it, the
// oldest half are left to the read cache's own eviction.
const maxOffered = 1024

// remember notes that block id was offered; on the writer.
func (l *Log) remember(id uint64) {
	if n := len(l.offered); n > 0 && l.offered[n-1] == id {
		return
	}
	if len(l.offered) == maxOffered {
		l.offered = append(l.offered[:0], l.offered[maxOffered/2:]...)
	}
	l.offered = append(l.offered, id)
}

// takeOutAll takes out every block this log offered, as it closes: no
// later open can read them (each open has a generation of its own), and
// left in they would hold the node's budget until evicted. On the writer.
func (l *Log) takeOutAll() {
	rc, gen := l.opts.ReadCache, l.cacheGen.Load()
	if rc == nil {
		return
	}
	for _, id := range l.offered {
		rc.takeOut(gen, id)
	}
	l.offered = nil
}

// forgetReads drops what was read before a range was declared lost: the
// read-ahead chunks, and this log's blocks in the node's read cache (by
// moving to a new generation), so no reader is served from the hole.
func (l *Log) forgetReads() {
	l.cacheGen.Store(nextCacheGen())
	l.ahead.reset()
}
