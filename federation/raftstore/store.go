// Package raftstore keeps hashicorp/raft's log and stable stores in one
// Pebble database: the control plane's log sits on the same engine as the
// broker's metadata.
//
// Keys: "l" + 8-byte big-endian index → an encoded raft.Log; "s" + key →
// the stable value. Every write is synced (raft's term and vote, and each
// log entry it acknowledges, are promises to the other voters).
//
// Log encoding, version 1: byte 1 (version), uvarint term, byte type,
// varint appended-at in Unix nanoseconds (0 = unset), uvarint length +
// data, uvarint length + extensions.
package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/fibril-edge/fibril/internal/pebblesched"
	"github.com/hashicorp/raft"
)

// ErrCorrupt is returned when a stored log entry cannot be decoded.
var ErrCorrupt = errors.New("raftstore: corrupt log entry")

const encodingVersion = 1

// Options configure Open.
type Options struct {
	// FS is the file system; default vfs.Default. Tests pass a crashable
	// vfs.MemFS.
	FS vfs.FS
}

// Store is a raft.LogStore and raft.StableStore on Pebble. Pebble's own
// locking guards it; Store holds no other mutable state.
type Store struct {
	db *pebble.DB
}

var (
	_ raft.LogStore    = (*Store)(nil)
	_ raft.StableStore = (*Store)(nil)
)

// Open opens (or creates) the store in dir.
func Open(dir string, o Options) (*Store, error) {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	opts := &pebble.Options{
		FS:           o.FS,
		Cache:        pebble.NewCache(2 << 20),
		MemTableSize: 2 << 20,
		Logger:       quietLogger{},
	}
	defer opts.Cache.Unref()
	// No periodic compaction ticker: an idle node does not wake.
	opts.Experimental.CompactionScheduler = pebblesched.New()
	opts.EnsureDefaults()
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("raftstore: open %s: %w", dir, err)
	}
	return &Store{db: db}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

func logKey(index uint64) []byte {
	k := make([]byte, 9)
	k[0] = 'l'
	binary.BigEndian.PutUint64(k[1:], index)
	return k
}

var (
	logLower = []byte{'l'}
	logUpper = []byte{'l' + 1}
)

// FirstIndex is the lowest stored index, 0 when the log is empty.
func (s *Store) FirstIndex() (uint64, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: logLower, UpperBound: logUpper})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	if !it.First() {
		return 0, it.Error()
	}
	return binary.BigEndian.Uint64(it.Key()[1:]), nil
}

// LastIndex is the highest stored index, 0 when the log is empty.
func (s *Store) LastIndex() (uint64, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: logLower, UpperBound: logUpper})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	if !it.Last() {
		return 0, it.Error()
	}
	return binary.BigEndian.Uint64(it.Key()[1:]), nil
}

// GetLog reads the entry at index into l, or returns raft.ErrLogNotFound.
func (s *Store) GetLog(index uint64, l *raft.Log) error {
	v, closer, err := s.db.Get(logKey(index))
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return fmt.Errorf("raftstore: get log %d: %w", index, err)
	}
	defer closer.Close()
	if err := decodeLog(v, l); err != nil {
		return fmt.Errorf("log %d: %w", index, err)
	}
	l.Index = index
	return nil
}

// StoreLog stores one entry.
func (s *Store) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs stores entries in one synced batch.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	b := s.db.NewBatch()
	defer b.Close()
	for _, l := range logs {
		if err := b.Set(logKey(l.Index), encodeLog(l), nil); err != nil {
			return err
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("raftstore: store %d log entries: %w", len(logs), err)
	}
	return nil
}

// DeleteRange deletes entries min through max, inclusive.
func (s *Store) DeleteRange(min, max uint64) error {
	end := logUpper
	if max < ^uint64(0) {
		end = logKey(max + 1)
	}
	if err := s.db.DeleteRange(logKey(min), end, pebble.Sync); err != nil {
		return fmt.Errorf("raftstore: delete log %d..%d: %w", min, max, err)
	}
	return nil
}

func stableKey(k []byte) []byte { return append([]byte{'s'}, k...) }

// Set stores a stable value.
func (s *Store) Set(k, v []byte) error {
	if err := s.db.Set(stableKey(k), v, pebble.Sync); err != nil {
		return fmt.Errorf("raftstore: set %s: %w", k, err)
	}
	return nil
}

// Get reads a stable value; a missing key reads as empty.
func (s *Store) Get(k []byte) ([]byte, error) {
	v, closer, err := s.db.Get(stableKey(k))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("raftstore: get %s: %w", k, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

// SetUint64 stores a stable integer.
func (s *Store) SetUint64(k []byte, v uint64) error {
	return s.Set(k, binary.BigEndian.AppendUint64(nil, v))
}

// GetUint64 reads a stable integer; a missing key reads as 0.
func (s *Store) GetUint64(k []byte) (uint64, error) {
	v, err := s.Get(k)
	if err != nil || len(v) == 0 {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("raftstore: %s holds %d bytes, not a uint64", k, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

func encodeLog(l *raft.Log) []byte {
	b := make([]byte, 0, 24+len(l.Data)+len(l.Extensions))
	b = append(b, encodingVersion)
	b = binary.AppendUvarint(b, l.Term)
	b = append(b, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	b = binary.AppendVarint(b, at)
	b = binary.AppendUvarint(b, uint64(len(l.Data)))
	b = append(b, l.Data...)
	b = binary.AppendUvarint(b, uint64(len(l.Extensions)))
	return append(b, l.Extensions...)
}

// decodeLog fills l from b (all but Index). It copies the byte fields: b
// belongs to Pebble.
func decodeLog(b []byte, l *raft.Log) error {
	if len(b) < 1 || b[0] != encodingVersion {
		return fmt.Errorf("%w: unknown encoding", ErrCorrupt)
	}
	b = b[1:]
	term, n := binary.Uvarint(b)
	if n <= 0 || len(b) < n+1 {
		return fmt.Errorf("%w: term", ErrCorrupt)
	}
	typ := raft.LogType(b[n])
	b = b[n+1:]
	at, n := binary.Varint(b)
	if n <= 0 {
		return fmt.Errorf("%w: appended-at", ErrCorrupt)
	}
	b = b[n:]
	data, b, ok := bytesField(b)
	if !ok {
		return fmt.Errorf("%w: data", ErrCorrupt)
	}
	ext, b, ok := bytesField(b)
	if !ok || len(b) != 0 {
		return fmt.Errorf("%w: extensions", ErrCorrupt)
	}
	*l = raft.Log{Term: term, Type: typ, Data: data, Extensions: ext}
	if at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	return nil
}

func bytesField(b []byte) (field, rest []byte, ok bool) {
	size, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < size {
		return nil, nil, false
	}
	b = b[n:]
	if size > 0 {
		field = append([]byte(nil), b[:size]...)
	}
	return field, b[size:], true
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
