package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/federation"
)

// joinWait bounds how long a node that served queues solo waits, at its
// first start with [cluster], to become a member and bring them along.
const joinWait = 2 * time.Minute

// joinWithData brings the queues this node served solo into the cluster
// it now belongs to: each is declared cluster-wide with this node as its
// owner, and its logs move to where the cluster keeps them, so consumers
// find every message and followers catch up from this node's logs.
//
// A queue is handed over live once this node is a member
// (Cluster.AdoptWhenMember): until then this node serves it, local and
// unreplicated, so a node that waits for its peers, or for "fibril cluster
// join" at run time, serves its queues meanwhile. A queue whose move a
// crash interrupted (some of its partitions moved already) is finished
// before the broker opens (Cluster.Adopt), waiting for membership.
//
// A queue the cluster already has under that name is not merged: it is
// reported, and stays on this node, local and unreplicated, with its logs
// where they are, until the operator decides. So does a queue whose
// dead-letter queue stayed local. Every start looks again.
func joinWithData(ctx context.Context, cluster *federation.Cluster, opts appliance.Options, log *slog.Logger) error {
	qs, err := appliance.SoloQueues(opts)
	if err != nil {
		return fmt.Errorf("read the queues this node served solo: %w", err)
	}
	if len(qs) == 0 {
		return nil
	}
	names := make([]string, len(qs))
	for i, q := range qs {
		names[i] = q.Config.Name
	}
	log.Info("this node joins the cluster with the queues it served solo; it serves them until it is a member", "queues", names)
	ctx, cancel := context.WithTimeout(ctx, joinWait)
	defer cancel()
	for _, q := range qs {
		name := q.Config.Name
		forget := func() error { return appliance.ForgetSoloQueue(opts, name) }
		if !partlyMoved(opts, q.PartDirs) {
			cluster.AdoptWhenMember(q.Config, q.PartDirs, forget)
			continue
		}
		log.Info("finishing a join a restart interrupted; waiting to be a member", "queue", name)
		if err := cluster.Adopt(ctx, q.Config, q.PartDirs); err != nil {
			return fmt.Errorf("%w; the queue's messages stay in %s/queues/%s and under %s/replicas/%s",
				err, opts.DataDir, name, opts.DataDir, name)
		}
		if err := forget(); err != nil {
			return fmt.Errorf("queue %s joined the cluster: %w", name, err)
		}
	}
	return nil
}

// partlyMoved reports whether some of a solo queue's partition logs are
// gone: a join moved them before a crash.
func partlyMoved(opts appliance.Options, dirs []string) bool {
	for _, d := range dirs {
		if _, err := opts.FS.Stat(d); err != nil {
			return true
		}
	}
	return false
}
