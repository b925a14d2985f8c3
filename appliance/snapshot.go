package appliance

import (
	"container/heap"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"
)

// A partition snapshot is the recovery authority for its partition once
// stored: the state after applying every record below Boundary.
//
//	u32 crc32c of the rest | u64 boundary | u32 n | n × message | u32 m | m × dedupe
//	message: u64 offset | u32 deliveries | u64 size | i64 unix nanos | u16 len id | id
//	dedupe:  u64 offset | i64 unix nanos | u16 len id | id
type snapshot struct {
	Boundary uint64
	Messages []message
	Dedupe   []dedupeRecord // message ids published inside the dedupe window
}

var snapshotCRC = crc32.MakeTable(crc32.Castagnoli)

// capture copies the state; every unsettled message is stored as ready,
// since leases do not survive a restart.
func (s *partitionState) capture() snapshot {
	snap := snapshot{Boundary: s.appliedNext, Messages: make([]message, 0, s.msgs.len())}
	s.msgs.each(func(m *message) bool { // in offset order
		c := *m
		c.status = msgReady
		snap.Messages = append(snap.Messages, c)
		return true
	})
	return snap
}

// restoreBlock is how many restored messages share one allocation: one
// allocation a message made restoring a million of them take half a
// second, and a block is freed once its last message is settled.
const restoreBlock = 256

// restore builds the state a snapshot describes.
func (snap snapshot) restore() *partitionState {
	s := newPartitionState(snap.Boundary)
	s.ready = make(offsetHeap, 0, len(snap.Messages))
	var block []message
	for i := range snap.Messages {
		if len(block) == 0 {
			block = make([]message, min(restoreBlock, len(snap.Messages)-i))
		}
		m := &block[0]
		block = block[1:]
		*m = snap.Messages[i]
		m.id = "" // the dedupe table is restored from Dedupe; messages keep no id (see message.id)
		m.status = msgReady
		s.msgs.put(m)
		s.count++
		s.bytes += m.size
		s.ready = append(s.ready, m.offset)
	}
	heap.Init(&s.ready) // capture stores offsets in order, which is a heap already
	return s
}

func (snap snapshot) encode() []byte {
	b := make([]byte, 4, 16+len(snap.Messages)*40)
	b = binary.LittleEndian.AppendUint64(b, snap.Boundary)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(snap.Messages)))
	for _, m := range snap.Messages {
		b = binary.LittleEndian.AppendUint64(b, m.offset)
		b = binary.LittleEndian.AppendUint32(b, m.deliveries)
		b = binary.LittleEndian.AppendUint64(b, uint64(m.size))
		b = binary.LittleEndian.AppendUint64(b, uint64(m.at.UnixNano()))
		b = appendString(b, m.id)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(snap.Dedupe)))
	for _, d := range snap.Dedupe {
		b = binary.LittleEndian.AppendUint64(b, d.Offset)
		b = binary.LittleEndian.AppendUint64(b, uint64(d.At.UnixNano()))
		b = appendString(b, d.ID)
	}
	binary.LittleEndian.PutUint32(b, crc32.Checksum(b[4:], snapshotCRC))
	return b
}

func decodeSnapshot(b []byte) (snapshot, error) {
	var snap snapshot
	if len(b) < 16 {
		return snap, fmt.Errorf("snapshot of %d bytes: %w", len(b), errBadEvent)
	}
	if crc32.Checksum(b[4:], snapshotCRC) != binary.LittleEndian.Uint32(b) {
		return snap, fmt.Errorf("snapshot checksum mismatch: %w", errBadEvent)
	}
	snap.Boundary = binary.LittleEndian.Uint64(b[4:])
	n := int(binary.LittleEndian.Uint32(b[12:]))
	b = b[16:]
	if n > len(b)/30 {
		return snap, fmt.Errorf("snapshot claims %d messages: %w", n, errBadEvent)
	}
	snap.Messages = make([]message, n)
	for i := range snap.Messages {
		if len(b) < 28 {
			return snap, fmt.Errorf("snapshot message %d: %w", i, errBadEvent)
		}
		m := &snap.Messages[i]
		m.offset = binary.LittleEndian.Uint64(b)
		m.deliveries = binary.LittleEndian.Uint32(b[8:])
		m.size = int64(binary.LittleEndian.Uint64(b[12:]))
		m.at = time.Unix(0, int64(binary.LittleEndian.Uint64(b[20:])))
		var err error
		if m.id, b, err = readString(b[28:]); err != nil {
			return snap, err
		}
	}
	if len(b) < 4 {
		return snap, fmt.Errorf("snapshot dedupe count: %w", errBadEvent)
	}
	n = int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if n > len(b)/18 {
		return snap, fmt.Errorf("snapshot claims %d dedupe ids: %w", n, errBadEvent)
	}
	snap.Dedupe = make([]dedupeRecord, n)
	for i := range snap.Dedupe {
		if len(b) < 18 {
			return snap, fmt.Errorf("snapshot dedupe id %d: %w", i, errBadEvent)
		}
		d := &snap.Dedupe[i]
		d.Offset = binary.LittleEndian.Uint64(b)
		d.At = time.Unix(0, int64(binary.LittleEndian.Uint64(b[8:])))
		var err error
		if d.ID, b, err = readString(b[16:]); err != nil {
			return snap, err
		}
	}
	if len(b) != 0 {
		return snap, fmt.Errorf("snapshot has %d trailing bytes: %w", len(b), errBadEvent)
	}
	return snap, nil
}
