package federation

import (
	"context"
	"errors"
	"fmt"
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
// node owns gets a gate fed by one stream per follower, and every queue
// placed on this node is declared in the local broker.
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

// Attach gives a partition this node owns its gate and its streams.
func (c *Cluster) Attach(queue string, partition int, cfg appliance.QueueConfig, log *wal.Log) appliance.ReplicaGate {
	st := c.node.State()
	as := st.Assignments[queue]
	if partition >= len(as) {
		c.log.Error("a partition without an assignment opened; it is not replicated", "queue", queue, "partition", partition)
		return nil
	}
	a := as[partition]
	boundary := replication.Durable
	if a.Policy.Boundary() == "written" {
		boundary = replication.Written
	}
	op := &ownedPartition{c: c, key: ownedKey(queue, partition), log: log, assignment: a,
		gate: replication.NewGate(boundary, a.Policy.Required(a.Replicas()), a.Followers)}
	for _, f := range a.Followers {
		op.senders.Add(replication.SenderOptions{
			Hello: replication.Hello{Epoch: a.Epoch, Durability: uint8(cfg.Durability), Partition: uint32(partition),
				Queue: queue, Owner: c.node.opts.ID},
			Follower: f,
			Addr:     st.Members[f].ClusterAddr,
			Dial:     c.node.DialReplica,
			Log:      log,
			Gate:     op.gate,
			Logger:   c.log,
		})
	}
	c.mu.Lock()
	c.owned[op.key] = op
	c.mu.Unlock()
	return op
}

// Gate returns the gate of a partition this node owns.
func (c *Cluster) Gate(queue string, partition int) (*replication.Gate, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	op, ok := c.owned[ownedKey(queue, partition)]
	if !ok {
		return nil, false
	}
	return op.gate, true
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
		op.senders.Close()
	}
	// The copies first: their streams end, so the cluster port's handlers
	// return and the node can close.
	ferr := c.follower.Close()
	return errors.Join(ferr, c.node.Close())
}

// ownedPartition is a partition this node owns: its gate and streams.
type ownedPartition struct {
	c          *Cluster
	key        string
	log        *wal.Log
	assignment control.Assignment
	gate       *replication.Gate
	senders    replication.Senders
}

func (op *ownedPartition) Wait(stop <-chan struct{}, next uint64) error {
	if err := op.gate.Wait(stop, next); err != nil {
		return fmt.Errorf("%w (%s)", err, op.gate.Pending(next))
	}
	return nil
}

func (op *ownedPartition) Floor() uint64 { return op.gate.Floor() }

func (op *ownedPartition) Status() string { return op.gate.Pending(op.log.WrittenNext()) }

func (op *ownedPartition) Detach() {
	op.senders.Close()
	op.c.mu.Lock()
	if op.c.owned[op.key] == op {
		delete(op.c.owned, op.key)
	}
	op.c.mu.Unlock()
}
