package wal

import (
	"fmt"
	"sync/atomic"

	"github.com/dgraph-io/ristretto/v2"
)

// ReadCache is one cache of log records for a whole node, shared by every
// log handed it (Options.ReadCache), with one memory budget. It holds the
// blocks leaving the logs' tail windows and the blocks read from segment
// files, so a reader that trails its writer past the tail window (a
// consumer behind, a follower catching up, an uplink replaying) is served
// from memory, and a block one reader brought in serves the next. It is a
// ristretto cache: one of them costs a few hundred KiB of fixed buffers
// whatever its budget, so a node has one, never one per log.
//
// Blocks are copied in when they enter and never change after, and a log
// keys its blocks with a generation that no other log, and no later open
// of the same directory, shares: a reader never meets another log's
// records, nor records this log has since declared lost.
type ReadCache struct {
	c                *ristretto.Cache[uint64, *cachedBlock]
	hits, misses     atomic.Uint64 // records served from the cache, and read past it
	offered, refused atomic.Uint64 // blocks offered, and blocks it turned away
}

// cachedBlock holds the encoded records of the tailBlockLen offsets of
// block id of generation gen that were read or written (nil where not).
type cachedBlock struct {
	gen, id uint64
	recs    [tailBlockLen][]byte
}

// cacheBlockOverhead is what a block costs beside its records' bytes.
const cacheBlockOverhead = 16 + tailBlockLen*24

// ReadCacheStats are a read cache's counters since it was made.
type ReadCacheStats struct {
	Budget  int64  // bytes
	Held    int64  // bytes of blocks held now
	Hits    uint64 // records served from the cache
	Misses  uint64 // records a log read past it from its segment files
	Offered uint64 // blocks offered to it
	Refused uint64 // blocks it turned away: its admission policy, or full buffers
}

// HitRatio is Hits over Hits plus Misses, 0 before any read.
func (s ReadCacheStats) HitRatio() float64 {
	if s.Hits+s.Misses == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Hits+s.Misses)
}

// NewReadCache makes a read cache of budget bytes (at least 1 MiB).
func NewReadCache(budget int64) (*ReadCache, error) {
	budget = max(budget, 1<<20)
	// Blocks are of 64 records: a budget holds about budget/4 KiB of them
	// for small records; ristretto counts ten times the items it holds.
	r := &ReadCache{}
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
	return r, nil
}

// Close frees the cache. Logs still using it read past it from then on.
func (r *ReadCache) Close() {
	r.c.Close()
}

// Stats returns the cache's counters.
func (r *ReadCache) Stats() ReadCacheStats {
	return ReadCacheStats{
		Budget: r.c.MaxCost(), Held: r.c.MaxCost() - r.c.RemainingCost(),
		Hits: r.hits.Load(), Misses: r.misses.Load(),
		Offered: r.offered.Load(), Refused: r.refused.Load(),
	}
}

// wait returns once every block offered so far has been admitted or
// turned away (ristretto admits in the background).
func (r *ReadCache) wait() { r.c.Wait() }

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
	b, ok := r.c.Get(r.key(gen, id))
	if !ok || b.gen != gen || b.id != id {
		return nil
	}
	return b
}

// del takes block id of generation gen out of the cache.
func (r *ReadCache) del(gen, id uint64) {
	r.c.Del(r.key(gen, id))
}

// put offers block id of generation gen: recs holds the encoded records of
// its offsets that are known (nil elsewhere). They are copied into one
// buffer, and merged with what the cache holds of the block already.
func (r *ReadCache) put(gen, id uint64, recs *[tailBlockLen][]byte) {
	b := &cachedBlock{gen: gen, id: id}
	if old := r.block(gen, id); old != nil {
		b.recs = old.recs
	}
	size := 0
	for _, rec := range recs {
		size += len(rec)
	}
	if size == 0 {
		return
	}
	buf := make([]byte, 0, size)
	for i, rec := range recs {
		if rec == nil {
			continue
		}
		at := len(buf)
		buf = append(buf, rec...)
		b.recs[i] = buf[at:len(buf):len(buf)]
	}
	cost := int64(cacheBlockOverhead)
	for _, rec := range b.recs {
		cost += int64(len(rec))
	}
	r.offered.Add(1)
	if !r.c.Set(r.key(gen, id), b, cost) {
		r.refused.Add(1)
	}
}
