package federation

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/client"
	"github.com/fibril-edge/fibril/federation/control"
	"github.com/fibril-edge/fibril/federation/replication"
	"github.com/fibril-edge/fibril/wal"
)

// ClusterOptions configure a Cluster: the control-plane node and this
// node's store of copies.
type ClusterOptions struct {
	Node Options
	// ReplicaDir holds this node's copies of partitions other nodes own.
	// Required.
	ReplicaDir string
	// ReplicaFS is the copies' file system; default vfs.Default.
	ReplicaFS vfs.FS
	// ReplicaSegmentSize of the copies' logs; default the log's default.
	ReplicaSegmentSize int64
	// Forward are the client options this node uses to reach other
	// nodes' client listeners when it forwards a publish (token, TLS).
	Forward client.Options
}

// Cluster ties a node's control plane, its local broker and replication
// together. It is the broker's appliance.Replication: every partition this
// node owns gets a gate fed by one stream per follower (followers its
// assignment gains later, as members join, get theirs then), and every
// queue placed on this node is declared in the local broker.
type Cluster struct {
	node     *Node
	follower *replication.Follower
	log      *slog.Logger

	mu     sync.Mutex // guards owned and broker
	owned  map[string]*ownedPartition
	broker *appliance.Broker

	serveMu  sync.Mutex      // one local declare at a time; guards declared
	declared map[string]bool // queues the local broker serves

	forwardOpts client.Options
	fwdMu       sync.Mutex // guards forward
	forward     map[string]*client.Client

	stop chan struct{}
	wg   sync.WaitGroup
}

var _ appliance.Replication = (*Cluster)(nil)

// OpenCluster opens the node and the store of copies.
func OpenCluster(o ClusterOptions) (*Cluster, error) {
	if o.ReplicaDir == "" {
		return nil, errors.New("federation: ReplicaDir is required")
	}
	logger := o.Node.Logger
	if logger == nil {
		logger = slog.Default()
	}
	c := &Cluster{log: logger.With("node", o.Node.ID), owned: map[string]*ownedPartition{},
		declared: map[string]bool{}, stop: make(chan struct{}), forwardOpts: o.Forward, forward: map[string]*client.Client{}}
	c.follower = replication.NewFollower(replication.FollowerOptions{Dir: o.ReplicaDir, FS: o.ReplicaFS,
		SegmentSize: o.ReplicaSegmentSize, Logger: c.log})
	o.Node.Replica = c.follower.Serve
	n, err := Open(o.Node)
	if err != nil {
		c.follower.Close()
		return nil, err
	}
	c.node = n
	c.wg.Add(1)
	go c.followAssignments()
	return c, nil
}

// Node is the control-plane node.
func (c *Cluster) Node() *Node { return c.node }

// Follower is this node's store of copies.
func (c *Cluster) Follower() *replication.Follower { return c.follower }

// Bind starts serving the queues placed on this node through b, whose
// Options.Replication must be c.
func (c *Cluster) Bind(b *appliance.Broker) {
	c.mu.Lock()
	c.broker = b
	c.mu.Unlock()
	c.wg.Add(1)
	go c.syncQueues()
}

// syncQueues declares in the local broker every queue this node owns, at
// start and after every applied command.
func (c *Cluster) syncQueues() {
	defer c.wg.Done()
	for {
		changed := c.node.Changed()
		st := c.node.State()
		for name := range st.Queues {
			if err := c.serve(st, name); err != nil {
				c.log.Error("cannot open a queue placed on this node", "queue", name, "err", err)
			}
		}
		select {
		case <-changed:
		case <-c.stop:
			return
		}
	}
}

// serve declares queue in the local broker when st places it on this
// node and it is not served yet. serveMu makes the sync loop and a
// declaring client take turns.
func (c *Cluster) serve(st *control.State, name string) error {
	q, ok := st.Queues[name]
	as := st.Assignments[name]
	if !ok || len(as) == 0 || as[0].Owner != c.node.opts.ID {
		return nil
	}
	c.serveMu.Lock()
	defer c.serveMu.Unlock()
	c.mu.Lock()
	b := c.broker
	c.mu.Unlock()
	if c.declared[name] || b == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := b.Declare(ctx, q.Config); err != nil {
		return err
	}
	c.declared[name] = true
	c.log.Info("serving queue", "queue", name, "policy", q.Policy.String())
	return nil
}

// DeclarePolicy declares a queue cluster-wide under policy ("" = the
// default for its mode). When this node owns it, the local broker serves
// it on return.
func (c *Cluster) DeclarePolicy(ctx context.Context, cfg appliance.QueueConfig, policy string) (control.Queue, bool, error) {
	q, created, err := c.node.Declare(ctx, cfg, policy)
	if err != nil {
		return q, created, err
	}
	return q, created, c.serve(c.node.State(), cfg.Name)
}

// JoinVia asks the cluster reachable at peer's cluster port to admit
// this node.
func (c *Cluster) JoinVia(ctx context.Context, peer string) error { return c.node.JoinVia(ctx, peer) }

// Declare is DeclarePolicy with the mode's default policy, answered as
// the broker answers a declare (the server's Cluster).
func (c *Cluster) Declare(ctx context.Context, cfg appliance.QueueConfig) (appliance.DeclareResult, error) {
	q, created, err := c.DeclarePolicy(ctx, cfg, "")
	if err != nil {
		return appliance.DeclareResult{}, err
	}
	return appliance.DeclareResult{Config: q.Config, Created: created, Warning: strings.Join(q.Warnings, " ")}, nil
}

func ownedKey(queue string, partition int) string { return queue + "/" + strconv.Itoa(partition) }

// Attach gives a partition this node owns its gate and its streams, and
// registers it so that followers its assignment gains later get theirs
// (see followAssignments).
//
// A node that restarts opens its queues before raft has replayed the
// control log to it, so the assignment may not be known yet. The
// partition then waits for it: nothing is confirmed or delivered, and
// retention removes nothing, until the assignment says which copies count.
func (c *Cluster) Attach(queue string, partition int, cfg appliance.QueueConfig, log *wal.Log) appliance.ReplicaGate {
	op := &ownedPartition{c: c, queue: queue, partition: partition, key: ownedKey(queue, partition),
		durability: cfg.Durability, log: log, ready: make(chan struct{})}
	c.mu.Lock()
	c.owned[op.key] = op
	c.mu.Unlock()
	// Registered first, then synced: a change applied in between is seen
	// here or by followAssignments, which now finds op.
	op.follow()
	if op.currentGate() == nil {
		c.log.Warn("partition waits for its assignment from the cluster before it confirms or delivers",
			"queue", queue, "partition", partition)
	}
	return op
}

// Gate returns the gate of a partition this node owns, once its
// assignment is known.
func (c *Cluster) Gate(queue string, partition int) (*replication.Gate, bool) {
	_, g := c.ownedGate(queue, partition)
	return g, g != nil
}

// ownedGate returns a partition this node owns and its gate; the gate is
// nil when the node does not own it or its assignment is not known yet.
func (c *Cluster) ownedGate(queue string, partition int) (*ownedPartition, *replication.Gate) {
	c.mu.Lock()
	op, ok := c.owned[ownedKey(queue, partition)]
	c.mu.Unlock()
	if !ok {
		return nil, nil
	}
	return op, op.currentGate()
}

// OwnerLog returns the log of a partition this node owns.
func (c *Cluster) OwnerLog(queue string, partition int) (*wal.Log, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	op, ok := c.owned[ownedKey(queue, partition)]
	if !ok {
		return nil, false
	}
	return op.log, true
}

// Close stops the streams, the node and the store of copies. Close the
// bound broker first.
func (c *Cluster) Close() error {
	c.fwdMu.Lock()
	close(c.stop)
	c.fwdMu.Unlock()
	c.closeForwarding() // ends forwarded publishes in flight
	c.wg.Wait()
	c.closeForwarding()
	c.mu.Lock()
	owned := c.owned
	c.owned = map[string]*ownedPartition{}
	c.mu.Unlock()
	for _, op := range owned {
		op.close()
	}
	// The copies first: their streams end, so the cluster port's handlers
	// return and the node can close.
	ferr := c.follower.Close()
	return errors.Join(ferr, c.node.Close())
}
