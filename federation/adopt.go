package federation

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/federation/control"
	"github.com/fibril-edge/fibril/federation/replication"
	"github.com/fibril-edge/fibril/wal"
)

// Adopt brings a queue this node served solo into the cluster, messages
// and all: it is declared cluster-wide with this node as its owner, and
// its partitions' logs, the directories in partDirs (partition i in
// partDirs[i]), move to where the node keeps the logs it owns, each with
// a history naming the records it holds as this owner's at epoch 1.
// Followers are then placed and catch up from the owner's log, as they do
// for any new queue. Call it before the broker opens: the broker then
// finds the logs, and its own checkpoints of them, where it looks.
//
// A queue the cluster already has (another mode or settings, or another
// node's) is refused with appliance.ErrConflict and its logs stay where
// they are: nothing is merged. Adopt may be called again after a crash
// part way: a partition already moved is left as it is.
func (c *Cluster) Adopt(ctx context.Context, cfg appliance.QueueConfig, partDirs []string) error {
	if err := c.declareAdopted(ctx, cfg); err != nil {
		return err
	}
	if err := c.moveAdoptedLogs(cfg.Name, partDirs); err != nil {
		return err
	}
	// Seen declared by this very process: the broker's open writes at
	// epoch 1 without a recovery, as for any queue this node just
	// declared. (After a restart part way the open goes through one.)
	c.mayServe(c.node.shared(), cfg.Name)
	return nil
}

// declareAdopted waits until this node is a member, then declares cfg
// cluster-wide with this node as its owner (control.OpAdopt) and waits
// until it applied the declaration. A name the cluster has otherwise is
// appliance.ErrConflict.
func (c *Cluster) declareAdopted(ctx context.Context, cfg appliance.QueueConfig) error {
	me := c.node.opts.ID
	if err := c.node.waitFor(ctx, func(s *control.State) bool { _, ok := s.Members[me]; return ok }); err != nil {
		return fmt.Errorf("queue %s joins the cluster with this node, which is not a member yet: %w", cfg.Name, err)
	}
	// A node that joins with its queues opened with no raft state: the
	// adoption must be committed after the leader told it where its live
	// commands begin, or the queue would not be one it saw declared.
	if err := c.node.awaitLive(ctx); err != nil {
		return fmt.Errorf("queue %s joins the cluster: %w", cfg.Name, err)
	}
	r := c.node.propose(ctx, control.Command{Op: control.OpAdopt, Queue: &cfg, Owner: me})
	if r.Err != nil {
		return fmt.Errorf("bring queue %s into the cluster: %w", cfg.Name, r.Err)
	}
	if err := c.node.waitFor(ctx, func(s *control.State) bool { return s.Queues[cfg.Name].AdoptedFrom == me }); err != nil {
		return fmt.Errorf("bring queue %s into the cluster: %w", cfg.Name, err)
	}
	return nil
}

// moveAdoptedLogs moves an adopted queue's partitions' logs, the
// directories in partDirs, to where this node keeps the logs it owns.
func (c *Cluster) moveAdoptedLogs(name string, partDirs []string) error {
	for part, src := range partDirs {
		if err := c.moveAdopted(src, c.logDir(name, part)); err != nil {
			return fmt.Errorf("queue %s partition %d: %w", name, part, err)
		}
	}
	c.log.Info("queue joined the cluster with its messages", "queue", name, "partitions", len(partDirs))
	return nil
}

// moveAdopted moves a solo partition's log directory from src to dst,
// where the cluster keeps it, with a history saying that one instance of
// this owner wrote all of it at epoch 1; the history is written first,
// so the moved log never lacks one. A src that is gone was moved before.
func (c *Cluster) moveAdopted(src, dst string) error {
	fs := c.replicaFS
	if _, err := fs.Stat(src); errors.Is(err, os.ErrNotExist) {
		if _, err := fs.Stat(fs.PathJoin(dst, replication.HistoryFile)); err != nil {
			return fmt.Errorf("neither the solo log %s nor the moved one in %s is there: %w", src, dst, err)
		}
		return nil
	}
	if names, err := fs.List(dst); err == nil && len(names) > 0 {
		return fmt.Errorf("%w: %s already holds a log; the solo log stays in %s", appliance.ErrConflict, dst, src)
	}
	h, err := replication.LoadHistory(fs, src)
	if err != nil || h == nil {
		var id [8]byte
		_, _ = rand.Read(id[:])
		h = replication.History{{Instance: binary.LittleEndian.Uint64(id[:]) | 1, From: 0, Epoch: 1}}
		if err := replication.SaveHistory(fs, src, h); err != nil {
			return err
		}
	}
	parent := fs.PathDir(dst)
	if err := wal.MkdirAllSynced(fs, parent); err != nil {
		return fmt.Errorf("make %s: %w", parent, err)
	}
	_ = fs.RemoveAll(dst) // an empty directory left by an earlier start
	if err := fs.Rename(src, dst); err != nil {
		return fmt.Errorf("move the log from %s to %s: %w", src, dst, err)
	}
	for _, dir := range []string{parent, fs.PathDir(src)} {
		if err := wal.SyncDir(fs, dir); err != nil {
			return err
		}
	}
	return nil
}
