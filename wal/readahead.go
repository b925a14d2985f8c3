package wal

import "sync"

// maxReadAhead bounds the chunk a read from a segment file brings in: the
// records after the one asked for are kept decoded, so a reader that
// trails the tail cache and reads on in offset order (a consumer behind
// the writer) is served from memory until the chunk is used up, instead of
// locating and reading each record in the file again.
const maxReadAhead = 64 << 10

// readAheadBytes is the chunk a cold read brings in: a sixteenth of the
// tail cache's budget, from minReadChunk to maxReadAhead (maxReadAhead
// with the cache off), so a log configured for little memory keeps
// little here too.
func readAheadBytes(tailCache int64) int {
	if tailCache <= 0 {
		return maxReadAhead
	}
	return int(min(max(tailCache/16, minReadChunk), maxReadAhead))
}

// readAhead holds the records decoded from the last chunks read from
// segment files, one per reader that trails the cache: two slots, so the
// owner's replication stream catching up and a consumer behind the writer
// do not evict each other. A lock guards the slots; a slot's slice is
// replaced, never changed, so records handed out stay valid.
type readAhead struct {
	mu    sync.Mutex
	slots [2]aheadSlot
	tick  uint64
}

type aheadSlot struct {
	recs []Record // consecutive offsets from recs[0].Offset
	used uint64   // tick of the last get or put
}

// get returns held records from offset on, or nil. A read just past a
// chunk drops it: its reader has moved on.
func (r *readAhead) get(offset uint64) []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.slots {
		s := &r.slots[i]
		if len(s.recs) == 0 {
			continue
		}
		first := s.recs[0].Offset
		end := first + uint64(len(s.recs))
		if offset == end {
			s.recs = nil
			continue
		}
		if offset >= first && offset < end {
			r.tick++
			s.used = r.tick
			return s.recs[offset-first:]
		}
	}
	return nil
}

// put keeps recs (consecutive, read-only from now on) in the slot used
// least recently.
func (r *readAhead) put(recs []Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &r.slots[0]
	if r.slots[1].used < s.used {
		s = &r.slots[1]
	}
	r.tick++
	s.recs, s.used = recs, r.tick
}

// reset drops every held chunk.
func (r *readAhead) reset() {
	r.mu.Lock()
	r.slots = [2]aheadSlot{}
	r.mu.Unlock()
}
