package wal

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/dgraph-io/ristretto/v2"
)

// The tail cache keeps recently written records so that readers right
// behind the writer are served without a pread. Records are grouped in
// blocks of tailBlockLen consecutive offsets, one ristretto entry per block:
// the writer fills the current block in place and tells ristretto about it
// twice (when it starts, with an estimated cost, and when it is full, with
// the real one). A ristretto Set per record cost the writer more than the
// write() itself; per block it is noise.

const (
	tailBlockShift = 6
	tailBlockLen   = 1 << tailBlockShift
)

// tailBlock holds the encoded records of tailBlockLen consecutive offsets.
type tailBlock struct {
	mu   sync.RWMutex // guards recs
	recs [tailBlockLen][]byte
}

type tailCache struct {
	c *ristretto.Cache[uint64, *tailBlock]

	// The writer goroutine's own: the block it is filling.
	cur     *tailBlock
	curID   uint64
	curCost int64
}

func newTailCache(budget int64) (*tailCache, error) {
	c, err := ristretto.NewCache(&ristretto.Config[uint64, *tailBlock]{
		NumCounters:        max(budget/1024, 1<<10),
		MaxCost:            budget,
		BufferItems:        64,
		IgnoreInternalCost: true,
	})
	if err != nil {
		return nil, fmt.Errorf("wal: tail cache: %w", err)
	}
	return &tailCache{c: c}, nil
}

// put caches the records just written: buf holds them back to back, starts
// says where each begins, and the first carries offset first. Called by the
// writer goroutine only.
func (t *tailCache) put(first uint64, buf []byte, starts []int) {
	cp := bytes.Clone(buf)
	for i := 0; i < len(starts); {
		off := first + uint64(i)
		if id := off >> tailBlockShift; t.cur == nil || id != t.curID {
			t.finish()
			t.cur, t.curID, t.curCost = &tailBlock{}, id, 0
			t.c.Set(id, t.cur, int64(tailBlockLen*(starts[min(i+1, len(starts)-1)]-starts[i]+recordHeaderSize)))
		}
		t.cur.mu.Lock()
		for ; i < len(starts) && (first+uint64(i))>>tailBlockShift == t.curID; i++ {
			end := len(cp)
			if i+1 < len(starts) {
				end = starts[i+1]
			}
			t.cur.recs[(first+uint64(i))&(tailBlockLen-1)] = cp[starts[i]:end:end]
			t.curCost += int64(end - starts[i])
		}
		full := t.cur.recs[tailBlockLen-1] != nil
		t.cur.mu.Unlock()
		if full {
			t.finish()
		}
	}
}

// finish tells ristretto the real cost of the block being filled.
func (t *tailCache) finish() {
	if t.cur != nil {
		t.c.Set(t.curID, t.cur, t.curCost)
		t.cur = nil
	}
}

// get returns offset's encoded record if the cache holds it.
func (t *tailCache) get(offset uint64) ([]byte, bool) {
	b, ok := t.c.Get(offset >> tailBlockShift)
	if !ok {
		return nil, false
	}
	b.mu.RLock()
	rec := b.recs[offset&(tailBlockLen-1)]
	b.mu.RUnlock()
	return rec, rec != nil
}

func (t *tailCache) close() { t.c.Close() }

// wait blocks until ristretto has applied every Set so far.
func (t *tailCache) wait() { t.c.Wait() }
