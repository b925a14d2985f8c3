package appliance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fibril-edge/fibril/wal"
)

// The metadata store and the logs know each other. A solo broker keeps
// each queue's declaration twice: in the metadata store, which is the
// authority, and as a QUEUE file beside the queue's logs
// (queues/<name>/QUEUE), a mirror rewritten from the store at every
// declare and every open. So a data directory whose metadata store was
// lost or replaced still says which queues its logs belong to, and with
// which settings:
//
//   - Open refuses to start when queues/ holds logs that no declaration
//     names (ErrOrphanLogs), instead of starting empty and adopting the old
//     logs when a queue of that name is declared again; a Declare of such
//     a name is refused the same way.
//   - RecoverDeclarations (fibril recover) declares those queues again
//     from their QUEUE files, or removes them when asked.
//
// A deletion is never half done: the queue's directory is marked DELETING
// (synced) before its declaration goes, then renamed aside and removed;
// Open finishes a deletion a crash interrupted, so a deleted queue never
// comes back as logs without a declaration.

const (
	queueFileName    = "QUEUE"    // the declaration beside the logs
	deletingFileName = "DELETING" // the queue's deletion has begun
	deletedPrefix    = ".deleted-"
	maxQueueFileSize = 64 << 10
)

// queuesDir holds the solo broker's queue directories.
func (b *Broker) queuesDir() string { return b.opts.FS.PathJoin(b.opts.DataDir, "queues") }

// solo reports whether the broker keeps its logs under queues/ itself (a
// cluster's logs live where the cluster puts them).
func (b *Broker) solo() bool { return b.opts.LogDir == nil }

// keptAsSolo reports whether a cluster node keeps queue name's logs where
// a solo broker keeps them: a queue it served solo and kept out of the
// cluster (a name clash when it joined). Its deletion removes them, as a
// solo broker's does.
func (b *Broker) keptAsSolo(name string) bool {
	return b.opts.LogDir != nil && b.opts.LogDir(name, 0) == b.opts.FS.PathJoin(b.queueDir(name), "0")
}

// saveDeclaration records cfg in the metadata store and, on a solo
// broker, mirrors it into the queue's QUEUE file. The store comes first:
// a crash between the two leaves a mirror that the next open rewrites.
func (b *Broker) saveDeclaration(cfg QueueConfig) error {
	if err := b.meta.putQueue(cfg); err != nil {
		return err
	}
	if !b.solo() {
		return nil
	}
	return writeQueueFile(b.opts.FS, b.queueDir(cfg.Name), cfg)
}

func writeQueueFile(fs vfs.FS, dir string, cfg QueueConfig) error {
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the declaration of %s: %w", cfg.Name, err)
	}
	data = append(data, '\n')
	if old, ok, err := wal.ReadSmallFile(fs, dir, queueFileName, maxQueueFileSize); err == nil && ok && bytes.Equal(old, data) {
		return nil
	}
	if err := wal.MkdirAllSynced(fs, dir); err != nil {
		return fmt.Errorf("create the directory of %s: %w", cfg.Name, err)
	}
	if err := wal.WriteFileSynced(fs, dir, queueFileName, data); err != nil {
		return fmt.Errorf("write the declaration of %s beside its logs: %w", cfg.Name, err)
	}
	return nil
}

// readQueueFile is the declaration a queue's QUEUE file holds; false when
// it has none.
func readQueueFile(fs vfs.FS, dir, name string) (QueueConfig, bool, error) {
	data, ok, err := wal.ReadSmallFile(fs, dir, queueFileName, maxQueueFileSize)
	if err != nil || !ok {
		return QueueConfig{}, ok, err
	}
	var cfg QueueConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return QueueConfig{}, true, fmt.Errorf("%s/%s: %w", dir, queueFileName, err)
	}
	if cfg.Name != name {
		return QueueConfig{}, true, fmt.Errorf("%s/%s names queue %q", dir, queueFileName, cfg.Name)
	}
	if err := cfg.Validate(); err != nil {
		return QueueConfig{}, true, fmt.Errorf("%s/%s: %w", dir, queueFileName, err)
	}
	return cfg, true, nil
}

// checkLogs runs at a solo broker's open, before any queue is opened: it
// finishes interrupted deletions, rewrites each declared queue's mirror,
// and refuses logs that no declaration names. It returns the
// declarations still standing.
func (b *Broker) checkLogs(cfgs []QueueConfig) ([]QueueConfig, error) {
	fs := b.opts.FS
	declared := make(map[string]QueueConfig, len(cfgs))
	for _, c := range cfgs {
		declared[c.Name] = c
	}
	names, err := listDir(fs, b.queuesDir())
	if err != nil {
		return nil, err
	}
	var orphans []string
	for _, name := range names {
		dir := fs.PathJoin(b.queuesDir(), name)
		if strings.HasPrefix(name, deletedPrefix) {
			if err := fs.RemoveAll(dir); err != nil {
				return nil, fmt.Errorf("remove %s, a deleted queue's logs: %w", dir, err)
			}
			continue
		}
		if deleting, err := exists(fs, fs.PathJoin(dir, deletingFileName)); err != nil {
			return nil, err
		} else if deleting {
			b.log.Warn("finishing a queue deletion a crash interrupted", "queue", name)
			if err := b.finishDelete(name); err != nil {
				return nil, err
			}
			delete(declared, name)
			continue
		}
		if _, ok := declared[name]; !ok {
			orphans = append(orphans, name)
		}
	}
	if len(orphans) > 0 {
		return nil, orphanError(b.opts.DataDir, orphans)
	}
	out := make([]QueueConfig, 0, len(declared))
	for _, c := range cfgs {
		if _, ok := declared[c.Name]; !ok {
			continue
		}
		if err := writeQueueFile(fs, b.queueDir(c.Name), c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func orphanError(dataDir string, names []string) error {
	slices.Sort(names)
	return fmt.Errorf("%w: %s/queues holds the logs of %d queue(s) that the metadata store (%s/meta) does not declare: %s. "+
		"The metadata store may have been lost or replaced. Stop fibrild and run `fibril recover %s` to declare them again "+
		"from their logs, or `fibril recover --discard %s` to remove them and their messages",
		ErrOrphanLogs, dataDir, len(names), dataDir, strings.Join(names, ", "), dataDir, dataDir)
}

// removeQueueLogs deletes a solo queue's logs and declaration without a
// half-done state: DELETING is marked first, then the declaration goes,
// then the directory is renamed aside and removed.
func (b *Broker) removeQueueLogs(name string) error {
	fs := b.opts.FS
	dir := b.queueDir(name)
	if ok, err := exists(fs, dir); err != nil {
		return err
	} else if ok {
		if err := wal.WriteFileSynced(fs, dir, deletingFileName, nil); err != nil {
			return fmt.Errorf("mark %s as being deleted: %w", name, err)
		}
	}
	return b.finishDelete(name)
}

// finishDelete is removeQueueLogs after the mark.
func (b *Broker) finishDelete(name string) error {
	fs := b.opts.FS
	if err := b.meta.deleteQueue(name); err != nil {
		return err
	}
	dir := b.queueDir(name)
	if ok, err := exists(fs, dir); err != nil || !ok {
		return err
	}
	aside := fs.PathJoin(b.queuesDir(), deletedPrefix+name)
	if err := fs.RemoveAll(aside); err != nil {
		return fmt.Errorf("remove %s: %w", aside, err)
	}
	if err := fs.Rename(dir, aside); err != nil {
		return fmt.Errorf("move %s's logs aside: %w", name, err)
	}
	if err := syncDir(fs, b.queuesDir()); err != nil {
		return err
	}
	if err := fs.RemoveAll(aside); err != nil {
		return fmt.Errorf("remove %s's logs: %w", name, err)
	}
	return nil
}

// refuseOrphan is nil unless a new queue name has logs no declaration
// names (its deletion crashed, or the metadata store was replaced).
func (b *Broker) refuseOrphan(name string) error {
	if !b.solo() {
		return nil
	}
	ok, err := exists(b.opts.FS, b.queueDir(name))
	if err != nil || !ok {
		return err
	}
	return orphanError(b.opts.DataDir, []string{name})
}

// Recovered is one queue RecoverDeclarations found logs of without a
// declaration.
type Recovered struct {
	Name string
	// Config is the declaration recovered, from the queue's QUEUE file, or
	// inferred from its logs (Inferred) when it has none: durable, as many
	// partitions as it has logs, the other settings at their defaults.
	Config   QueueConfig
	Inferred bool
	// Discarded: removed, with its messages, instead of declared again.
	Discarded bool
}

// RecoverDeclarations repairs a data directory whose logs outlived their
// declarations (fibril recover): each queue under queues/ that the
// metadata store does not declare is declared again from its QUEUE file
// (or with what its logs show), or, with discard, removed. The broker
// must not be running on the directory. Its messages are rebuilt from the
// log at the next open: acks recorded in the log hold, so at most the
// messages settled since their last record are delivered again.
func RecoverDeclarations(opts Options, discard bool) ([]Recovered, error) {
	if opts.DataDir == "" {
		return nil, fmt.Errorf("%w: no data directory", ErrInvalid)
	}
	opts = opts.withDefaults()
	if opts.LogDir != nil {
		return nil, fmt.Errorf("%w: a cluster node's logs are recovered by the cluster", ErrInvalid)
	}
	meta, err := openMeta(opts.FS.PathJoin(opts.DataDir, "meta"), opts.FS)
	if err != nil {
		return nil, err
	}
	b := &Broker{opts: opts, log: opts.Logger, meta: meta}
	defer meta.close()
	cfgs, err := meta.queues()
	if err != nil {
		return nil, err
	}
	declared := map[string]bool{}
	for _, c := range cfgs {
		declared[c.Name] = true
	}
	names, err := listDir(opts.FS, b.queuesDir())
	if err != nil {
		return nil, err
	}
	var out []Recovered
	for _, name := range names {
		if declared[name] || strings.HasPrefix(name, deletedPrefix) || ValidateName(name) != nil {
			continue
		}
		dir := b.queueDir(name)
		if deleting, err := exists(opts.FS, opts.FS.PathJoin(dir, deletingFileName)); err != nil {
			return out, err
		} else if deleting {
			continue // Open finishes it
		}
		r := Recovered{Name: name}
		cfg, ok, err := readQueueFile(opts.FS, dir, name)
		if err != nil {
			return out, err
		}
		if !ok {
			if cfg, err = inferDeclaration(opts.FS, dir, name); err != nil {
				return out, err
			}
			r.Inferred = true
		}
		r.Config = cfg
		if discard {
			if err := b.removeQueueLogs(name); err != nil {
				return out, err
			}
			r.Discarded = true
		} else if err := b.saveDeclaration(cfg); err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// inferDeclaration is what a queue directory without a QUEUE file shows:
// its partitions are the numbered log directories 0..n-1.
func inferDeclaration(fs vfs.FS, dir, name string) (QueueConfig, error) {
	entries, err := listDir(fs, dir)
	if err != nil {
		return QueueConfig{}, err
	}
	n := 0
	for _, e := range entries {
		if i, err := strconv.Atoi(e); err == nil && i >= 0 && i+1 > n {
			n = i + 1
		}
	}
	if n == 0 {
		return QueueConfig{}, fmt.Errorf("%s holds no partition logs and no %s file: nothing to recover", dir, queueFileName)
	}
	cfg := QueueConfig{Name: name, Durability: Durable, Partitions: n}.WithDefaults()
	return cfg, cfg.Validate()
}

// listDir names what dir holds; nothing when it does not exist.
func listDir(fs vfs.FS, dir string) ([]string, error) {
	names, err := fs.List(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	slices.Sort(names)
	return names, nil
}

func exists(fs vfs.FS, path string) (bool, error) {
	_, err := fs.Stat(path)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return false, fmt.Errorf("stat %s: %w", path, err)
}

func syncDir(fs vfs.FS, dir string) error { return wal.SyncDir(fs, dir) }
