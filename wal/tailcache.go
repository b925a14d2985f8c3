package wal

import "sync"

// The tail cache keeps recently written records so that readers right
// behind the writer are served without a pread. Records are grouped in
// blocks of tailBlockLen consecutive offsets, and the cache is a window of
// consecutive blocks ending at the writer: the writer fills the newest
// block in place and drops the oldest blocks once the records held pass
// the budget. Its memory is the budget plus a few hundred bytes, whatever
// the budget, so a broker can give each of thousands of partitions a
// small one. (A general-purpose cache per partition cost about 300 KiB
// of fixed buffers each, and its admission policy refused new blocks that
// readers were about to ask for.)

const (
	tailBlockShift = 6
	tailBlockLen   = 1 << tailBlockShift
)

// tailBlock holds the records of tailBlockLen consecutive offsets (Type 0
// where it holds none). The payloads are the appenders' own, which do not
// change once appended (Entry).
type tailBlock struct {
	mu   sync.RWMutex // guards recs
	recs [tailBlockLen]Record
	cost int64 // bytes held, as encoded in a segment; guarded by tailCache.mu
}

type tailCache struct {
	budget int64
	// leave, when set, is handed the blocks the window drops at once (for
	// the node's read cache), on the writer's goroutine, outside the locks.
	leave func(gone []goneBlock)
	gone  []goneBlock // blocks dropped by the put under way; the writer's

	mu     sync.RWMutex // guards first, blocks, cost and low
	first  uint64       // block id of blocks[0]
	blocks []*tailBlock // consecutive block ids from first, oldest first
	cost   int64        // bytes held by blocks
	low    uint64       // lowest offset held when blocks is not empty
}

type goneBlock struct {
	id uint64
	b  *tailBlock
}

func newTailCache(budget int64) (*tailCache, error) {
	return &tailCache{budget: budget}, nil
}

// put caches the records just written, in offset order. Called by the
// writer goroutine only.
func (t *tailCache) put(recs []Record) {
	for i := 0; i < len(recs); {
		id := recs[i].Offset >> tailBlockShift
		b := t.blockFor(recs[i].Offset)
		var added int64
		b.mu.Lock()
		for ; i < len(recs) && recs[i].Offset>>tailBlockShift == id; i++ {
			b.recs[recs[i].Offset&(tailBlockLen-1)] = recs[i]
			added += int64(encodedSize(len(recs[i].Payload)))
		}
		b.mu.Unlock()
		t.mu.Lock()
		b.cost += added
		t.cost += added
		t.evictLocked()
		t.mu.Unlock()
	}
	// Nothing writes a block once the window has dropped it.
	if len(t.gone) > 0 {
		t.leave(t.gone)
		clear(t.gone)
		t.gone = t.gone[:0]
	}
}

// blockFor returns the newest block if it is offset's, or starts a new one
// (restarting the window at offset if its block does not follow it).
func (t *tailCache) blockFor(offset uint64) *tailBlock {
	id := offset >> tailBlockShift
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := uint64(len(t.blocks)); n > 0 && t.first+n-1 == id {
		return t.blocks[n-1]
	}
	if n := uint64(len(t.blocks)); n == 0 || t.first+n != id {
		clear(t.blocks)
		t.blocks, t.first, t.cost, t.low = t.blocks[:0], id, 0, offset
	}
	b := &tailBlock{}
	t.blocks = append(t.blocks, b)
	return b
}

// evictLocked drops the oldest blocks while the cache holds more than its
// budget (the newest too, when one block alone is over it).
func (t *tailCache) evictLocked() {
	for t.cost > t.budget && len(t.blocks) > 0 {
		// The newest block, dropped alone over the budget, is still being
		// filled: handing it on would offer the read cache a block per
		// record. Its records are read from the segment file instead.
		if t.leave != nil && len(t.blocks) > 1 {
			t.gone = append(t.gone, goneBlock{t.first, t.blocks[0]})
		}
		t.cost -= t.blocks[0].cost
		t.blocks[0] = nil
		t.blocks = t.blocks[1:]
		t.first++
		t.low = max(t.low, t.first<<tailBlockShift)
	}
}

// from returns the lowest offset the cache holds, or false when it holds
// nothing.
func (t *tailCache) from() (uint64, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.low, len(t.blocks) > 0
}

// get returns offset's record if the cache holds it.
func (t *tailCache) get(offset uint64) (Record, bool) {
	id := offset >> tailBlockShift
	t.mu.RLock()
	if id < t.first || id-t.first >= uint64(len(t.blocks)) {
		t.mu.RUnlock()
		return Record{}, false
	}
	b := t.blocks[id-t.first]
	t.mu.RUnlock()
	b.mu.RLock()
	rec := b.recs[offset&(tailBlockLen-1)]
	b.mu.RUnlock()
	return rec, rec.Type != 0
}

func (t *tailCache) close() {
	t.mu.Lock()
	clear(t.blocks)
	t.blocks, t.cost = nil, 0
	t.mu.Unlock()
}

// wait returns once every put so far is visible to get: at once, since
// put publishes under the lock.
func (t *tailCache) wait() {}
