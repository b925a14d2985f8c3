package federation

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/federation/control"
	"github.com/fibril-edge/fibril/federation/replication"
	"github.com/fibril-edge/fibril/wal"
)

// ownedPartition is a partition this node owns: its gate and one stream
// per follower. It follows its assignment: a follower the assignment gains
// (a member joined, the replicas setting rose) gets a stream from offset 0
// and a place in the gate, and the gate takes the policy's count for the
// new number of copies. Followers are never dropped here, and a new epoch
// (a new owner) is left to recovery.
//
// Until the assignment is known (a restarted node opens its queues before
// raft has replayed the control log) the partition has no gate: Wait
// blocks and Floor keeps everything.
type ownedPartition struct {
	c          *Cluster
	queue      string
	partition  int
	key        string
	durability appliance.Durability
	log        *wal.Log
	ready      chan struct{}       // closed once gate is set
	history    replication.History // this instance's, fixed at Attach

	mu        sync.Mutex // guards the fields below
	gate      *replication.Gate
	epoch     uint64   // the assignment's epoch when the gate was made
	followers []string // those with a stream, in assignment order
	streams   map[string]*replication.Sender
	closed    bool
}

// currentGate is the partition's gate, nil until its assignment is known.
func (op *ownedPartition) currentGate() *replication.Gate {
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.gate
}

// followAssignments brings every owned partition in line with its
// assignment, at start and after every applied command, until Close.
func (c *Cluster) followAssignments() {
	defer c.wg.Done()
	for {
		changed := c.node.Changed()
		c.mu.Lock()
		owned := slices.Collect(maps.Values(c.owned))
		c.mu.Unlock()
		for _, op := range owned {
			op.follow()
		}
		select {
		case <-changed:
		case <-c.stop:
			return
		}
	}
}

// follow starts a stream for every follower of the current assignment
// that has none, after adding it to the gate (the stream's first report
// must find it there).
func (op *ownedPartition) follow() {
	var a control.Assignment
	addrs := map[string]string{}
	op.c.node.read(func(s *control.State) {
		as := s.Assignments[op.queue]
		if op.partition >= len(as) {
			return // deleted: the broker detaches the partition
		}
		a = as[op.partition]
		a.Followers = slices.Clone(a.Followers)
		for _, f := range a.Followers {
			addrs[f] = s.Members[f].ClusterAddr
		}
	})
	if a.Owner != op.c.node.opts.ID {
		return // not known yet, or not this node's (part 2: a new owner)
	}
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.closed {
		return
	}
	if op.gate == nil {
		boundary := replication.Durable
		if control.Boundary(op.durability) == "written" {
			boundary = replication.Written
		}
		op.gate, op.epoch = replication.NewGate(boundary, a.Policy.Required(1), nil), a.Epoch
		close(op.ready)
	}
	if a.Epoch != op.epoch {
		return
	}
	var added []string
	for _, f := range a.Followers {
		if !slices.Contains(op.followers, f) {
			added = append(added, f)
		}
	}
	if len(added) == 0 {
		return
	}
	op.followers = append(op.followers, added...)
	required := a.Policy.Required(1 + len(op.followers))
	op.gate.SetFollowers(op.followers, required)
	for _, f := range added {
		if op.streams == nil {
			op.streams = map[string]*replication.Sender{}
		}
		op.streams[f] = replication.StartSender(replication.SenderOptions{
			Hello: replication.Hello{Epoch: a.Epoch, Incarnation: a.Incarnation, Durability: op.durability, Partition: uint32(op.partition),
				Queue: op.queue, Owner: op.c.node.opts.ID, History: op.history},
			Follower: f,
			Addr:     addrs[f],
			Dial:     op.c.node.DialReplica,
			Log:      op.log,
			Gate:     op.gate,
			Logger:   op.c.log,
		})
	}
	op.c.log.Info("replicating partition", "queue", op.queue, "partition", op.partition,
		"new_followers", added, "policy", a.Policy.Describe(op.durability, 1+len(op.followers)))
}

// close stops the streams; follow starts none after it.
func (op *ownedPartition) close() {
	op.mu.Lock()
	op.closed = true
	streams := op.streams
	op.streams = nil
	op.mu.Unlock()
	for _, s := range streams {
		s.Close()
	}
}

// streamStats are the counters of each follower's stream.
func (op *ownedPartition) streamStats() map[string]replication.SenderStats {
	op.mu.Lock()
	defer op.mu.Unlock()
	out := make(map[string]replication.SenderStats, len(op.streams))
	for f, s := range op.streams {
		out[f] = s.Stats()
	}
	return out
}

func (op *ownedPartition) Wait(stop <-chan struct{}, next uint64) error {
	select {
	case <-op.ready:
	case <-stop:
		return fmt.Errorf("%w (the partition's assignment is not known on this node yet)", replication.ErrStopped)
	}
	g := op.currentGate()
	if err := g.Wait(stop, next); err != nil {
		return fmt.Errorf("%w (%s)", err, g.Pending(next))
	}
	return nil
}

func (op *ownedPartition) Floor() uint64 {
	if g := op.currentGate(); g != nil {
		return g.Floor()
	}
	return 0
}

func (op *ownedPartition) Status() string {
	if g := op.currentGate(); g != nil {
		return g.Pending(op.log.WrittenNext())
	}
	return "waiting for the partition's assignment from the cluster"
}

func (op *ownedPartition) Detach() {
	op.close()
	op.c.mu.Lock()
	if op.c.owned[op.key] == op {
		delete(op.c.owned, op.key)
	}
	op.c.mu.Unlock()
}
