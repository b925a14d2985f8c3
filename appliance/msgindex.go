package appliance

// msgIndex holds a partition's unsettled messages by offset. Offsets grow
// with every record, and messages are settled roughly in the order they
// came, so the index is a window of pages of msgPageLen consecutive
// offsets, from the page of the lowest message held to the page of the
// highest: a lookup is two array reads, not a hash, and walking it goes
// in offset order. A page (2 KiB) is allocated when a message lands in it
// and dropped when its last message leaves, and the window costs a
// pointer per page it spans (8 bytes per 256 offsets, 32 MB for a billion
// offsets between the oldest unsettled message and the newest). Messages
// spread thinly (one left in every 256 offsets) cost a page each, where a
// map took about 100 bytes; packed ones cost 8 bytes each, where a
// million of them took twice the memory in a map, and restoring them into
// it took most of a start-up with 1 GiB unconsumed.
type msgIndex struct {
	base  uint64     // page number of pages[0]
	pages []*msgPage // consecutive page numbers from base; nil where none is held; no nil at either end
	n     int        // messages held
}

const (
	msgPageShift = 8
	msgPageLen   = 1 << msgPageShift
)

type msgPage struct {
	m [msgPageLen]*message
	n int // messages held
}

// len is the number of messages held.
func (x *msgIndex) len() int { return x.n }

// get returns the message at off, or nil.
func (x *msgIndex) get(off uint64) *message {
	if pg := x.page(off); pg != nil {
		return pg.m[off&(msgPageLen-1)]
	}
	return nil
}

// page returns the page that holds off's slot, or nil.
func (x *msgIndex) page(off uint64) *msgPage {
	p := off >> msgPageShift
	if p < x.base || p-x.base >= uint64(len(x.pages)) {
		return nil
	}
	return x.pages[p-x.base]
}

// put holds m at its offset, replacing what was there.
func (x *msgIndex) put(m *message) {
	p := m.offset >> msgPageShift
	switch {
	case len(x.pages) == 0:
		x.base = p
		x.pages = append(x.pages[:0], nil)
	case p < x.base: // below the window: it grows down (not the usual order)
		grow := x.base - p
		pages := make([]*msgPage, uint64(len(x.pages))+grow)
		copy(pages[grow:], x.pages)
		x.pages, x.base = pages, p
	}
	for p-x.base >= uint64(len(x.pages)) {
		x.pages = append(x.pages, nil)
	}
	pg := x.pages[p-x.base]
	if pg == nil {
		pg = new(msgPage)
		x.pages[p-x.base] = pg
	}
	slot := &pg.m[m.offset&(msgPageLen-1)]
	if *slot == nil {
		pg.n++
		x.n++
	}
	*slot = m
}

// delete drops the message at off, if one is held.
func (x *msgIndex) delete(off uint64) {
	pg := x.page(off)
	if pg == nil || pg.m[off&(msgPageLen-1)] == nil {
		return
	}
	pg.m[off&(msgPageLen-1)] = nil
	pg.n--
	x.n--
	if pg.n > 0 {
		return
	}
	x.pages[off>>msgPageShift-x.base] = nil
	for len(x.pages) > 0 && x.pages[0] == nil {
		x.pages = x.pages[1:]
		x.base++
	}
	for len(x.pages) > 0 && x.pages[len(x.pages)-1] == nil {
		x.pages = x.pages[:len(x.pages)-1]
	}
	if len(x.pages) == 0 {
		x.pages = nil // let the window's array go
	}
}

// each calls fn for every message held, in offset order, until fn
// returns false. fn must not put or delete.
func (x *msgIndex) each(fn func(m *message) bool) {
	for _, pg := range x.pages {
		if pg == nil {
			continue
		}
		for _, m := range &pg.m {
			if m != nil && !fn(m) {
				return
			}
		}
	}
}
