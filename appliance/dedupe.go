package appliance

import (
	"sync"
	"time"
)

// Bounds of a queue's dedupe table, for all its partitions together
// (QueueConfig).
const (
	// DefaultDedupeMaxEntries is how many ids a queue remembers at most
	// when the declaration leaves DedupeMaxEntries zero.
	DefaultDedupeMaxEntries = 100_000
	// DefaultDedupeMaxBytes bounds the memory a queue's remembered ids
	// take (DedupeEntryCost each, plus the id) when the declaration leaves
	// DedupeMaxBytes zero.
	DefaultDedupeMaxBytes = 16 << 20
	// MaxDedupeEntries and the byte range bound what a declaration may ask.
	MaxDedupeEntries  = 10_000_000
	MinDedupeMaxBytes = 1 << 20 // room for 16 ids of MaxMessageIDBytes
	MaxDedupeMaxBytes = 1 << 30
	// DedupeEntryCost is what one remembered id costs besides its own
	// bytes: its entry, its slot in the table's map and its place in the
	// partition's list. The dedupe byte bound counts it, so the bound is
	// on memory, not on id bytes alone; TestDedupeEntryCost keeps it
	// honest.
	DedupeEntryCost = 128
)

// dedupeBounds is what a queue's table may hold, all partitions together.
type dedupeBounds struct {
	entries int
	bytes   int64
}

// DedupeBounds are the dedupe table's bounds (for the whole queue) in
// effect for the declaration: its own, or the defaults for zero.
func (c QueueConfig) DedupeBounds() (entries, bytes int64) {
	b := c.dedupeBounds()
	return int64(b.entries), b.bytes
}

// dedupeBounds are the declaration's bounds, defaults filled in.
func (c *QueueConfig) dedupeBounds() dedupeBounds {
	b := dedupeBounds{entries: int(c.DedupeMaxEntries), bytes: c.DedupeMaxBytes}
	if b.entries <= 0 {
		b.entries = DefaultDedupeMaxEntries
	}
	if b.bytes <= 0 {
		b.bytes = DefaultDedupeMaxBytes
	}
	return b
}

// dedupeCost is what remembering id costs under the byte bound.
func dedupeCost(id string) int64 { return int64(len(id)) + DedupeEntryCost }

// dedupeTable is a queue's memory of message ids published inside its
// dedupe window. One map finds an id whatever partition holds it (a
// retry without a key may be routed elsewhere); each partition keeps its
// ids in a list, oldest first, and the table as a whole is bounded in
// entries and bytes, however many partitions the queue has. Past a bound
// the queue's oldest ids (the oldest at the head of any partition's list)
// are evicted early, before their window ends, and counted: a publish is
// never refused for it, and dedupe is then guaranteed only for the newest
// ids that fit. Ids past their window leave the list as publishes to the
// partition go by.
//
// An entry is pending while its publish is in flight, stored once the
// publish is applied (with its offset), and removed if the publish fails.
// A duplicate of a pending entry waits for the outcome and gets the same
// offset or error.
type dedupeTable struct {
	mu      sync.Mutex // guards the fields below
	byID    map[string]*dedupeEntry
	parts   []dedupeList
	waiting map[*dedupeEntry][]dedupeWaiter // duplicates of pending entries
	evicted int64                           // evicted by a bound since the queue opened
	entries int                             // listed, in all partitions
	bytes   int64                           // their cost, in all partitions
}

// dedupeWaiter answers a duplicate with the original's partition and
// offset, or its error.
type dedupeWaiter func(part int, offset uint64, err error)

type dedupeList struct {
	oldest, newest *dedupeEntry
	entries        int
	bytes          int64
}

type dedupeEntry struct {
	id           string
	at           int64 // unix nanos of the publish
	offset       uint64
	older, newer *dedupeEntry
	part         int32
	stored       bool // applied at offset; else pending
	listed       bool // in its partition's list and the map
}

func newDedupeTable(partitions int) *dedupeTable {
	return &dedupeTable{byID: make(map[string]*dedupeEntry), parts: make([]dedupeList, partitions),
		waiting: make(map[*dedupeEntry][]dedupeWaiter)}
}

// DedupeInfo reports a queue's dedupe table.
type DedupeInfo struct {
	Entries int64 // ids remembered, in all partitions
	Bytes   int64 // what they cost under the byte bound
	Evicted int64 // ids evicted by a bound before their window ended, since the queue opened
}

func (t *dedupeTable) info() DedupeInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	return DedupeInfo{Entries: int64(t.entries), Bytes: t.bytes, Evicted: t.evicted}
}

// lookup finds id for a publish headed for partition part at now. A
// duplicate inside the window returns true, and dup is called with the
// original's offset (or error) once it is known, perhaps before lookup
// returns. Otherwise the id gets a pending entry, which the publish
// completes.
func (t *dedupeTable) lookup(id string, part int, now time.Time, cfg *QueueConfig, dup dedupeWaiter) (*dedupeEntry, bool) {
	at := now.UnixNano()
	window := int64(cfg.DedupeWindow)
	t.mu.Lock()
	t.expireLocked(part, at, window)
	if e, ok := t.byID[id]; ok {
		if at-e.at <= window {
			if !e.stored {
				t.waiting[e] = append(t.waiting[e], dup)
				t.mu.Unlock()
				return e, true
			}
			p, off := int(e.part), e.offset
			t.mu.Unlock()
			dup(p, off, nil)
			return e, true
		}
		t.removeLocked(e)
	}
	e := &dedupeEntry{id: id, at: at, part: int32(part)}
	t.addLocked(e, cfg.dedupeBounds(), true)
	t.mu.Unlock()
	return e, false
}

// hold registers, at open, the id of a record that waits for the replica
// gate, unless the table knows the id already.
func (t *dedupeTable) hold(id string, part int, at time.Time, bounds dedupeBounds) (*dedupeEntry, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.byID[id]; ok {
		return nil, false
	}
	e := &dedupeEntry{id: id, at: at.UnixNano(), part: int32(part)}
	t.addLocked(e, bounds, false)
	return e, true
}

// complete ends a pending entry's publish: stored at offset, or failed
// (then the id is forgotten, so a retry publishes anew). The duplicates
// waiting for it are answered.
func (t *dedupeTable) complete(e *dedupeEntry, offset uint64, err error) {
	t.mu.Lock()
	if err != nil {
		if e.listed && !e.stored {
			t.removeLocked(e)
		}
	} else if !e.stored {
		e.stored, e.offset = true, offset
	}
	waiters := t.waiting[e]
	delete(t.waiting, e)
	t.mu.Unlock()
	for _, w := range waiters {
		w(int(e.part), offset, err)
	}
}

// remember marks the id of a publish applied at offset as stored, adding
// it if the table does not hold it (its entry was evicted while the
// publish was in flight). Another publish of the id holding the entry
// keeps it.
func (t *dedupeTable) remember(id string, part int, offset uint64, at time.Time, bounds dedupeBounds) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.byID[id]
	switch {
	case ok && !e.stored && int(e.part) == part:
		e.stored, e.offset = true, offset
	case !ok:
		t.addLocked(&dedupeEntry{id: id, at: at.UnixNano(), part: int32(part), stored: true, offset: offset}, bounds, true)
	}
}

// restore loads, at open, ids a snapshot or the replay found stored in
// the partition, oldest first; those past the window at now are skipped.
func (t *dedupeTable) restore(part int, recs []dedupeRecord, now time.Time, window time.Duration, bounds dedupeBounds) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range recs {
		if now.Sub(r.At) > window {
			continue
		}
		if old, ok := t.byID[r.ID]; ok {
			t.removeLocked(old) // a later record of the id wins
		}
		t.addLocked(&dedupeEntry{id: r.ID, at: r.At.UnixNano(), part: int32(part), stored: true, offset: r.Offset}, bounds, false)
	}
}

// records lists the partition's stored ids, oldest first, for its
// snapshot.
func (t *dedupeTable) records(part int) []dedupeRecord {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]dedupeRecord, 0, t.parts[part].entries)
	for e := t.parts[part].oldest; e != nil; e = e.newer {
		if e.stored {
			out = append(out, dedupeRecord{ID: e.id, Offset: e.offset, At: time.Unix(0, e.at)})
		}
	}
	return out
}

// addLocked appends e to its partition's list, then evicts the queue's
// oldest entries while the table is past a bound (never e itself: the
// newest id is always remembered), counting them if count is set.
func (t *dedupeTable) addLocked(e *dedupeEntry, bounds dedupeBounds, count bool) {
	l := &t.parts[e.part]
	e.older, e.newer = l.newest, nil
	if l.newest != nil {
		l.newest.newer = e
	} else {
		l.oldest = e
	}
	l.newest = e
	l.entries++
	l.bytes += dedupeCost(e.id)
	t.entries++
	t.bytes += dedupeCost(e.id)
	e.listed = true
	t.byID[e.id] = e
	for t.entries > bounds.entries || t.bytes > bounds.bytes {
		oldest := t.oldestLocked(e)
		if oldest == nil {
			return
		}
		t.removeLocked(oldest)
		if count {
			t.evicted++
		}
	}
}

// oldestLocked is the oldest entry at the head of any partition's list,
// other than keep; nil when keep is the only one.
func (t *dedupeTable) oldestLocked(keep *dedupeEntry) *dedupeEntry {
	var oldest *dedupeEntry
	for i := range t.parts {
		e := t.parts[i].oldest
		if e == keep {
			e = e.newer
		}
		if e != nil && (oldest == nil || e.at < oldest.at) {
			oldest = e
		}
	}
	return oldest
}

// expireLocked drops the partition's oldest ids that are past the window
// at at.
func (t *dedupeTable) expireLocked(part int, at, window int64) {
	l := &t.parts[part]
	for l.oldest != nil && at-l.oldest.at > window {
		t.removeLocked(l.oldest)
	}
}

// removeLocked takes e out of its list and the map. The duplicates waiting
// on a pending e still get its outcome.
func (t *dedupeTable) removeLocked(e *dedupeEntry) {
	if !e.listed {
		return
	}
	l := &t.parts[e.part]
	if e.older != nil {
		e.older.newer = e.newer
	} else {
		l.oldest = e.newer
	}
	if e.newer != nil {
		e.newer.older = e.older
	} else {
		l.newest = e.older
	}
	e.older, e.newer, e.listed = nil, nil, false
	l.entries--
	l.bytes -= dedupeCost(e.id)
	t.entries--
	t.bytes -= dedupeCost(e.id)
	if t.byID[e.id] == e {
		delete(t.byID, e.id)
	}
}

// dedupeRecords gathers, while a partition is rebuilt, the ids its
// snapshot and replay found, within the same bounds as the table, so a
// long replay does not hold every id it reads.
type dedupeRecords struct {
	recs  []dedupeRecord
	bytes int64
}

func (d *dedupeRecords) add(r dedupeRecord, bounds dedupeBounds) {
	d.recs = append(d.recs, r)
	d.bytes += dedupeCost(r.ID)
	// Dropped from the front: append reallocates as the capacity left
	// behind runs out, copying only what is kept.
	for len(d.recs) > 1 && (len(d.recs) > bounds.entries || d.bytes > bounds.bytes) {
		d.bytes -= dedupeCost(d.recs[0].ID)
		d.recs = d.recs[1:]
	}
}
