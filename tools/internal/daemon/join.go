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
// it now belongs to, before the broker opens: each is declared
// cluster-wide with this node as its owner, and its logs move to where
// the cluster keeps them (federation's Cluster.Adopt), so consumers find
// every message and followers catch up from this node's logs. A queue the
// cluster already has under that name stops the start with its logs left
// as they are: nothing is merged, and the operator decides.
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
	log.Info("this node joins the cluster with the queues it served solo; waiting to be a member", "queues", names)
	ctx, cancel := context.WithTimeout(ctx, joinWait)
	defer cancel()
	for _, q := range qs {
		name := q.Config.Name
		if err := cluster.Adopt(ctx, q.Config, q.PartDirs); err != nil {
			return fmt.Errorf("%w; the queue's messages stay in %s/queues/%s: start without [cluster] to consume or forward them, or remove the queue there, then start again",
				err, opts.DataDir, name)
		}
		if err := appliance.ForgetSoloQueue(opts, name); err != nil {
			return fmt.Errorf("queue %s joined the cluster: %w", name, err)
		}
	}
	return nil
}
