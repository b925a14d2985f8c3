package replication

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/fibril-edge/fibril/wal"
)

// A History says which owner instance wrote which offsets of a log, as
// raft's terms do for its entries: an owner starts a new instance every
// time it opens a partition's log (a power cut may have cut the log back,
// so the offsets it writes from there on are not the ones it wrote
// before), and a copy keeps, beside its records, the instances that wrote
// them. A copy is a prefix of the owner's log exactly when every record it
// holds lies in the range the owner's history gives the instance that
// wrote it; a copy holding records of an instance past where the owner's
// history ends that instance has diverged there.
//
// Each interval also names the epoch its instance owned the partition in
// (0 until the instance is installed: an instance writes nothing before),
// so a recovery can compare copies by the epoch of their last record.
//
// On disk (HistoryFile), little endian:
//
//	u32 crc32c of the rest | u32 n | n × (u64 instance | u64 from | u64 epoch)
//
// A file of 16-byte intervals (instance | from) is read as epoch 0.
type History []Interval

// Interval is one instance's run: it wrote the offsets from From up to
// the next interval's From (the last one up to the log's end), in Epoch.
type Interval struct {
	Instance uint64
	From     uint64
	Epoch    uint64
}

// HistoryFile is a history's file name, in the directory it describes.
const HistoryFile = "HISTORY"

// legacyInstance stands for the records written before histories existed.
const legacyInstance = 0

var (
	historyCRC = crc32.MakeTable(crc32.Castagnoli)
	// ErrHistory is matched by an unreadable history file.
	ErrHistory = errors.New("replication: damaged history")
)

// Start is h's history of a log whose first record is at head: an empty
// history becomes one legacy interval from head.
func (h History) Start(head uint64) History {
	if len(h) == 0 {
		return History{{Instance: legacyInstance, From: head}}
	}
	return h
}

// Begin returns h with a new instance writing from offset from: intervals
// at or past from describe records the log no longer holds and go.
func (h History) Begin(instance, from uint64) History {
	i := 0
	for i < len(h) && h[i].From < from {
		i++
	}
	return append(slices.Clone(h[:i]), Interval{Instance: instance, From: from})
}

// Installed returns h with its last instance owning the partition at
// epoch: the records it writes from now on are epoch's.
func (h History) Installed(epoch uint64) History {
	h = slices.Clone(h)
	if len(h) > 0 {
		h[len(h)-1].Epoch = epoch
	}
	return h
}

// LastEpoch is the epoch of the record before end: the epoch of the
// interval holding offset end-1, 0 for an empty log.
func (h History) LastEpoch(end uint64) uint64 {
	var e uint64
	for _, iv := range h {
		if iv.From >= end {
			break
		}
		e = iv.Epoch
	}
	return e
}

// Adopt returns a copy's history once it takes the owner's records from
// offset from on: its own intervals below from, then the owner's from
// there (the one covering from clipped to start there, unless the copy
// keeps nothing of its own below from: an empty copy started at the
// owner's head takes the owner's intervals whole, so that when it owns
// the partition later, a copy holding the same instance's records from
// further back is still judged a prefix, not cut back to its head).
func (h History) Adopt(owner History, from uint64) History {
	var out History
	for _, iv := range h {
		if iv.From < from { // what lies at or past from is the owner's now
			out = append(out, iv)
		}
	}
	for i, iv := range owner {
		end := ^uint64(0)
		if i+1 < len(owner) {
			end = owner[i+1].From
		}
		if end <= from {
			continue
		}
		if len(out) > 0 {
			iv.From = max(iv.From, from)
		}
		if n := len(out); n > 0 && out[n-1].Instance == iv.Instance {
			continue // the same run goes on
		}
		out = append(out, iv)
	}
	return out
}

// ConsistentEnd is how far a copy holding [start, end) with history c is
// a prefix of a log with history owner: end when all of it is, else the
// first offset where the copy holds a record the owner's log does not.
func ConsistentEnd(c History, start, end uint64, owner History) uint64 {
	c = c.Start(start)
	for i, iv := range c {
		from, to := max(iv.From, start), end
		if i+1 < len(c) {
			to = min(c[i+1].From, end)
		}
		if from >= to {
			continue
		}
		lo, hi, ok := owner.span(iv.Instance)
		switch {
		case !ok || from < lo || from >= hi:
			return from
		case to > hi:
			return hi
		}
	}
	return end
}

// span is the range of offsets an instance wrote in h.
func (h History) span(instance uint64) (from, to uint64, ok bool) {
	for i, iv := range h {
		if iv.Instance != instance {
			continue
		}
		to = ^uint64(0)
		if i+1 < len(h) {
			to = h[i+1].From
		}
		return iv.From, to, true
	}
	return 0, 0, false
}

// encode is the history file's content.
func (h History) encode() []byte {
	b := make([]byte, 8, 8+24*len(h))
	binary.LittleEndian.PutUint32(b[4:], uint32(len(h)))
	for _, iv := range h {
		b = binary.LittleEndian.AppendUint64(b, iv.Instance)
		b = binary.LittleEndian.AppendUint64(b, iv.From)
		b = binary.LittleEndian.AppendUint64(b, iv.Epoch)
	}
	binary.LittleEndian.PutUint32(b, crc32.Checksum(b[4:], historyCRC))
	return b
}

func decodeHistory(b []byte) (History, error) {
	if len(b) < 8 || crc32.Checksum(b[4:], historyCRC) != binary.LittleEndian.Uint32(b) {
		return nil, fmt.Errorf("%w: checksum", ErrHistory)
	}
	n := binary.LittleEndian.Uint32(b[4:])
	size := uint64(24) // instance | from | epoch; 16 in files written before epochs
	switch uint64(len(b) - 8) {
	case 24 * uint64(n):
	case 16 * uint64(n):
		size = 16
	default:
		return nil, fmt.Errorf("%w: %d intervals in %d bytes", ErrHistory, n, len(b)-8)
	}
	h := make(History, n)
	for i := range h {
		p := b[8+size*uint64(i):]
		h[i] = Interval{Instance: binary.LittleEndian.Uint64(p), From: binary.LittleEndian.Uint64(p[8:])}
		if size == 24 {
			h[i].Epoch = binary.LittleEndian.Uint64(p[16:])
		}
		if i > 0 && h[i].From < h[i-1].From {
			return nil, fmt.Errorf("%w: interval %d starts before the one before it", ErrHistory, i)
		}
	}
	return h, nil
}

// LoadHistory reads dir's history; a missing file is an empty history.
func LoadHistory(fs vfs.FS, dir string) (History, error) {
	f, err := fs.Open(fs.PathJoin(dir, HistoryFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open history in %s: %w", dir, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read history in %s: %w", dir, err)
	}
	h, err := decodeHistory(b)
	if err != nil {
		return nil, fmt.Errorf("history in %s: %w", dir, err)
	}
	return h, nil
}

// SaveHistory writes h as dir's history, crash-safe (wal.WriteFileSynced).
func SaveHistory(fs vfs.FS, dir string, h History) error {
	if err := wal.MkdirAllSynced(fs, dir); err != nil {
		return fmt.Errorf("history directory %s: %w", dir, err)
	}
	if err := wal.WriteFileSynced(fs, dir, HistoryFile, h.encode()); err != nil {
		return fmt.Errorf("write history in %s: %w", dir, err)
	}
	return nil
}
