package appliance

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// A solo broker's queues can join a cluster with their messages: the
// node brings each one along, and its partitions' logs move from
// queues/<name>/<partition> to where the cluster keeps the logs a node
// owns (federation's Cluster.Adopt). SoloQueues lists what is there to
// bring; ForgetSoloQueue removes what is left once the logs have moved.
// The metadata store keeps each declaration and its checkpoints: the
// broker that opens next, with the cluster's LogDir, finds both.

// SoloQueue is a queue a solo broker left in a data directory.
type SoloQueue struct {
	Config QueueConfig
	// PartDirs are its partitions' log directories, partition i in
	// PartDirs[i]; one may be gone already (moved by an earlier start).
	PartDirs []string
}

// SoloQueues lists the queues under opts.DataDir/queues that have a
// declaration beside them (their QUEUE file), every dead-letter queue
// before the queues that name it. A directory being deleted is skipped.
func SoloQueues(opts Options) ([]SoloQueue, error) {
	opts = opts.withDefaults()
	fs := opts.FS
	b := &Broker{opts: opts}
	names, err := listDir(fs, b.queuesDir())
	if err != nil {
		return nil, err
	}
	var out []SoloQueue
	for _, name := range names {
		if strings.HasPrefix(name, deletedPrefix) || ValidateName(name) != nil {
			continue
		}
		dir := b.queueDir(name)
		if deleting, err := exists(fs, fs.PathJoin(dir, deletingFileName)); err != nil || deleting {
			if err != nil {
				return nil, err
			}
			continue
		}
		cfg, ok, err := readQueueFile(fs, dir, name)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		sq := SoloQueue{Config: cfg}
		for p := range cfg.Partitions {
			sq.PartDirs = append(sq.PartDirs, fs.PathJoin(dir, strconv.Itoa(p)))
		}
		out = append(out, sq)
	}
	deadLetters := map[string]bool{}
	for _, q := range out {
		deadLetters[q.Config.DeadLetter] = true
	}
	slices.SortStableFunc(out, func(a, b SoloQueue) int {
		switch da, db := deadLetters[a.Config.Name], deadLetters[b.Config.Name]; {
		case da && !db:
			return -1
		case db && !da:
			return 1
		}
		return 0
	})
	return out, nil
}

// ForgetSoloQueue removes queue name's solo directory once its logs have
// moved out of it: its QUEUE file, then the directory, synced. A
// partition log still in it is refused.
func ForgetSoloQueue(opts Options, name string) error {
	opts = opts.withDefaults()
	fs := opts.FS
	b := &Broker{opts: opts}
	dir := b.queueDir(name)
	left, err := listDir(fs, dir)
	if err != nil {
		return err
	}
	for _, e := range left {
		if e != queueFileName {
			return fmt.Errorf("%s still holds %s: not removed", dir, e)
		}
	}
	if err := fs.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return syncDir(fs, b.queuesDir())
}
