package appliance

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/fibril-edge/fibril/internal/pebblesched"
)

// metaStore keeps declarations, runtime settings and partition snapshots in
// Pebble. Every write is synced: each is a promise (a declaration exists, a
// snapshot is recovery authority).
//
// Keys: "q/<queue>" JSON QueueConfig; "s/settings" JSON Settings;
// "c/<queue>/<partition>" binary snapshot.
type metaStore struct {
	db *pebble.DB
	// room, if set, is asked before every write and refuses it when the
	// disk is nearly full (diskGuard.metaRoom): Pebble treats a failed
	// write to its log as fatal and panics.
	room func(frees bool) error
}

// hasRoom is nil when a write may go ahead; frees says the write lets
// space be freed (a checkpoint's snapshot, a deletion), which may spend
// the data directory's reserve (reserve.go).
func (m *metaStore) hasRoom(frees bool) error {
	if m.room == nil {
		return nil
	}
	return m.room(frees)
}

func openMeta(dir string, fs vfs.FS) (*metaStore, error) {
	opts := &pebble.Options{
		FS:           fs,
		Cache:        pebble.NewCache(4 << 20),
		MemTableSize: 2 << 20,
		Logger:       quietPebbleLogger{},
	}
	defer opts.Cache.Unref()
	// Pebble's default compaction scheduler ticks every 100 ms for ever. This
	// one (pebble's own, without the ticker) grants compactions when asked
	// and when one finishes, so an idle broker does not wake.
	opts.Experimental.CompactionScheduler = pebblesched.New()
	opts.EnsureDefaults()
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("open metadata store %s: %w", dir, err)
	}
	return &metaStore{db: db}, nil
}

func (m *metaStore) close() error { return m.db.Close() }

func queueKey(name string) []byte { return []byte("q/" + name) }
func snapshotKey(name string, partition int) []byte {
	return []byte("c/" + name + "/" + strconv.Itoa(partition))
}

var settingsKey = []byte("s/settings")

func (m *metaStore) putJSON(key []byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if err := m.hasRoom(false); err != nil {
		return fmt.Errorf("store %s: %w", key, err)
	}
	if err := m.db.Set(key, b, pebble.Sync); err != nil {
		return fmt.Errorf("store %s: %w", key, err)
	}
	return nil
}

// getJSON reads key into v and reports whether it existed.
func (m *metaStore) getJSON(key []byte, v any) (bool, error) {
	b, closer, err := m.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", key, err)
	}
	defer closer.Close()
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("decode %s: %w", key, err)
	}
	return true, nil
}

func (m *metaStore) putQueue(c QueueConfig) error { return m.putJSON(queueKey(c.Name), c) }

func (m *metaStore) queues() ([]QueueConfig, error) {
	it, err := m.db.NewIter(&pebble.IterOptions{LowerBound: []byte("q/"), UpperBound: []byte("q0")})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []QueueConfig
	for it.First(); it.Valid(); it.Next() {
		var c QueueConfig
		if err := json.Unmarshal(it.Value(), &c); err != nil {
			return nil, fmt.Errorf("decode %s: %w", it.Key(), err)
		}
		out = append(out, c)
	}
	return out, it.Error()
}

// deleteQueue removes a declaration and its snapshots in one synced batch.
func (m *metaStore) deleteQueue(name string) error {
	if err := m.hasRoom(true); err != nil {
		return fmt.Errorf("delete queue %s: %w", name, err)
	}
	b := m.db.NewBatch()
	defer b.Close()
	if err := b.Delete(queueKey(name), nil); err != nil {
		return err
	}
	if err := b.DeleteRange([]byte("c/"+name+"/"), []byte("c/"+name+"0"), nil); err != nil {
		return err
	}
	return b.Commit(pebble.Sync)
}

func (m *metaStore) putSnapshot(name string, partition int, snap snapshot) error {
	if err := m.hasRoom(true); err != nil {
		return fmt.Errorf("store snapshot %s/%d: %w", name, partition, err)
	}
	if err := m.db.Set(snapshotKey(name, partition), snap.encode(), pebble.Sync); err != nil {
		return fmt.Errorf("store snapshot %s/%d: %w", name, partition, err)
	}
	return nil
}

func (m *metaStore) snapshot(name string, partition int) (snapshot, bool, error) {
	b, closer, err := m.db.Get(snapshotKey(name, partition))
	if errors.Is(err, pebble.ErrNotFound) {
		return snapshot{}, false, nil
	}
	if err != nil {
		return snapshot{}, false, fmt.Errorf("read snapshot %s/%d: %w", name, partition, err)
	}
	defer closer.Close()
	snap, err := decodeSnapshot(b)
	if err != nil {
		return snapshot{}, false, fmt.Errorf("snapshot %s/%d: %w", name, partition, err)
	}
	return snap, true, nil
}

// quietPebbleLogger drops Pebble's informational chatter; errors still
// surface as returned errors.
type quietPebbleLogger struct{}

func (quietPebbleLogger) Infof(string, ...any)  {}
func (quietPebbleLogger) Errorf(string, ...any) {}
func (quietPebbleLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}
