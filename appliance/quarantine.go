package appliance

import (
	"errors"

	"github.com/fibril-edge/fibril/wal"
)

// Quarantine. Damaged records in a partition log, found by its recovery,
// its background scrub or a read, are copied aside by the log (never
// deleted) and their offsets become a hole: only the damaged range is
// lost, the records after it serve. A sealed segment whose header is
// corrupt, met while replaying or delivering, gets the whole segment
// renamed aside. The partition drops the messages it held in a hole,
// counts them as lost, and serves everything else. The log, QueueInfo
// (Quarantined, LostRecords) and the metrics say what was quarantined,
// which offsets it held and how many records were lost.

// quarantineRecord is one quarantined range and the messages lost with it.
type quarantineRecord struct {
	Hole wal.Hole
	Lost int64 // unsettled messages dropped with it (known when it happened)
}

// quarantineOnRead looks at a read error: a hole is returned as is, and a
// corrupt sealed segment is quarantined first. Anything else is not ours.
func (b *Broker) quarantineOnRead(q *queue, idx int, log *wal.Log, err error) (wal.Hole, bool) {
	var he *wal.HoleError
	if errors.As(err, &he) {
		return he.Hole, true
	}
	var ce *wal.CorruptionError
	if !errors.As(err, &ce) {
		return wal.Hole{}, false
	}
	hole, qerr := log.Quarantine(ce.Segment)
	if qerr != nil {
		b.log.Error("corrupt segment could not be quarantined", "queue", q.cfg().Name, "partition", idx,
			"segment", ce.Segment, "corruption", ce, "err", qerr)
		return wal.Hole{}, false
	}
	b.log.Error("QUARANTINED a corrupt segment: its messages are lost, the rest of the queue serves",
		"queue", q.cfg().Name, "partition", idx, "from_offset", hole.From, "to_offset", hole.To,
		"file", hole.Path, "corruption", ce)
	return hole, true
}

// dropRange removes the unsettled messages in [from, to) and returns how
// many there were.
func (s *partitionState) dropRange(from, to uint64) int64 {
	var gone []*message
	s.msgs.each(func(m *message) bool {
		if m.offset >= from && m.offset < to {
			gone = append(gone, m)
		}
		return m.offset < to
	})
	for _, m := range gone {
		s.remove(m)
	}
	return int64(len(gone))
}

// quarantineLive handles corruption met while delivering: the segment is
// quarantined and its messages leave the partition. It returns the hole.
func (p *partition) quarantineLive(err error) (wal.Hole, bool) {
	if err == nil {
		return wal.Hole{}, false
	}
	hole, ok := p.q.b.quarantineOnRead(p.q, p.idx, p.log, err)
	if !ok {
		return wal.Hole{}, false
	}
	p.mu.Lock()
	ended, lost := p.core.dropRange(hole.From, hole.To)
	p.releaseLocked(ended)
	known := false
	for i := range p.quarantined {
		if p.quarantined[i].Hole.From == hole.From {
			p.quarantined[i].Lost += lost
			known = true
		}
	}
	if !known {
		p.quarantined = append(p.quarantined, quarantineRecord{Hole: hole, Lost: lost})
	}
	p.mirrorLocked()
	p.dirty = true
	p.mu.Unlock()
	p.q.counters.lostQuarantined.Add(lost)
	p.q.b.markDirty(p)
	return hole, true
}
