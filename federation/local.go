package federation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/federation/control"
)

// Queues kept local. A node that joins a cluster brings the queues it
// served solo along (Adopt), unless the cluster already has a queue of
// that name (with another mode or other settings, or simply declared
// there first). Nothing is merged: such a queue stays on this node, with
// its logs where the solo node kept them, served by this node alone and
// replicated nowhere, until the operator decides (drains and deletes it
// here, or deletes the cluster's and restarts this node, which then
// brings it along).
//
// On this node the local queue shadows the cluster's of the same name:
// clients connected here publish to it and consume from it, and a delete
// through this node deletes it (and only it). Through any other node the
// name is the cluster's queue. The cluster's queue never has a copy here:
// it existed before this node joined, and placement moves no existing
// queue onto a new member.

// A queue this node served solo joins the cluster once this node is a
// member, live: AdoptWhenMember keeps it local (served here, unreplicated)
// until then, so a node that is not a member yet (it waits for its peers,
// or for "fibril cluster join" at run time) serves its queues meanwhile.
// The hand-over (adoptLive) declares the queue cluster-wide with this node
// as its owner, closes it in the broker, moves its logs to where the node
// keeps the logs it owns, and opens it there with its gate; publishes and
// subscriptions that arrive meanwhile wait for it (Owner). Subscriptions
// open on the queue end and their clients subscribe again; deliveries not
// settled come back, as after any close.

// LocalQueue is a queue this node keeps out of the cluster.
type LocalQueue struct {
	Name   string                `json:"name"`
	Config appliance.QueueConfig `json:"-"`
	// Dirs are its partitions' log directories, where the solo node
	// kept them.
	Dirs []string `json:"-"`
	// Reason says why it is local: the clash, both declarations named,
	// or that it joins the cluster once this node is a member.
	Reason string `json:"reason"`
	// Joining: it joins the cluster once this node is a member; false
	// for a clash, which stays until the operator decides.
	Joining bool `json:"joining,omitempty"`

	forget func() error  // removes what is left of its solo directory
	moving chan struct{} // non-nil while adoptLive hands it over; closed once done
}

// KeepLocal marks a queue this node served solo as kept out of the
// cluster for good, because the cluster has a queue of that name (see
// above): the broker opens it from partDirs, unreplicated, and this node
// serves it under its name. Call it before the broker opens.
func (c *Cluster) KeepLocal(cfg appliance.QueueConfig, partDirs []string, reason string) {
	c.localMu.Lock()
	defer c.localMu.Unlock()
	c.local[cfg.Name] = LocalQueue{Name: cfg.Name, Config: cfg, Dirs: slices.Clone(partDirs), Reason: reason}
}

// AdoptWhenMember keeps a queue this node served solo local until this
// node is a member, then brings it into the cluster, messages and all
// (see above); forget is called once its logs moved, to remove the rest
// of its solo directory. A name the cluster has by then is kept local
// for good, as KeepLocal does. Call it before the broker opens.
func (c *Cluster) AdoptWhenMember(cfg appliance.QueueConfig, partDirs []string, forget func() error) {
	c.localMu.Lock()
	defer c.localMu.Unlock()
	c.local[cfg.Name] = LocalQueue{Name: cfg.Name, Config: cfg, Dirs: slices.Clone(partDirs), Joining: true, forget: forget,
		Reason: "this node is not a cluster member yet: the queue joins the cluster once it is"}
}

// LocalQueues lists the queues this node keeps out of the cluster, by name.
func (c *Cluster) LocalQueues() []LocalQueue {
	c.localMu.Lock()
	defer c.localMu.Unlock()
	out := make([]LocalQueue, 0, len(c.local))
	for _, q := range c.local {
		out = append(out, q)
	}
	slices.SortFunc(out, func(a, b LocalQueue) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// isLocal reports whether this node serves queue outside the cluster
// now (a queue being handed over is no longer).
func (c *Cluster) isLocal(queue string) bool {
	c.localMu.Lock()
	defer c.localMu.Unlock()
	q, ok := c.local[queue]
	return ok && q.moving == nil
}

// localQueue is the local queue of that name, if any.
func (c *Cluster) localQueue(name string) (LocalQueue, bool) {
	c.localMu.Lock()
	defer c.localMu.Unlock()
	q, ok := c.local[name]
	return q, ok
}

// handingOver is closed once queue's hand-over to the cluster is done;
// nil when none is under way.
func (c *Cluster) handingOver(queue string) <-chan struct{} {
	c.localMu.Lock()
	defer c.localMu.Unlock()
	if q, ok := c.local[queue]; ok && q.moving != nil {
		return q.moving
	}
	return nil
}

// localDir is the log directory of a local queue's partition.
func (c *Cluster) localDir(queue string, partition int) (string, bool) {
	c.localMu.Lock()
	defer c.localMu.Unlock()
	q, ok := c.local[queue]
	if !ok || q.moving != nil || partition >= len(q.Dirs) {
		return "", false
	}
	return q.Dirs[partition], true
}

// adoptPending hands the queues waiting for membership over to the
// cluster once this node is a member, dead-letter queues first; a step
// that fails is tried again a second later. It ends once none waits.
func (c *Cluster) adoptPending() {
	defer c.wg.Done()
	me := c.node.opts.ID
	for {
		changed := c.node.Changed()
		pending := c.joining()
		if len(pending) == 0 {
			return
		}
		if _, member := c.node.State().Members[me]; member {
			failed := false
			for _, q := range pending {
				if err := c.adoptLive(q); err != nil {
					c.log.Error("queue not brought into the cluster yet; retrying", "queue", q.Name, "err", err)
					failed = true
					break
				}
			}
			if !failed {
				continue // every queue handed over (or kept local): look again
			}
			select {
			case <-time.After(time.Second):
			case <-c.stop:
				return
			}
			continue
		}
		select {
		case <-changed:
		case <-c.stop:
			return
		}
	}
}

// joining lists the queues waiting to join, dead-letter queues first.
func (c *Cluster) joining() []LocalQueue {
	var out []LocalQueue
	deadLetters := map[string]bool{}
	for _, q := range c.LocalQueues() {
		if q.Joining {
			out = append(out, q)
			deadLetters[q.Config.DeadLetter] = true
		}
	}
	slices.SortStableFunc(out, func(a, b LocalQueue) int {
		switch da, db := deadLetters[a.Name], deadLetters[b.Name]; {
		case da && !db:
			return -1
		case db && !da:
			return 1
		}
		return 0
	})
	return out
}

// adoptLive hands one queue over to the cluster (see above). Every step
// may be repeated after a failure.
func (c *Cluster) adoptLive(q LocalQueue) error {
	name := q.Name
	if dl, ok := c.localQueue(q.Config.DeadLetter); ok {
		if dl.Joining {
			return fmt.Errorf("its dead-letter queue %s has not joined yet", dl.Name)
		}
		c.keepClash(q, fmt.Sprintf("its dead-letter queue %s stays local (a queue and its dead-letter queue share a node)", dl.Name))
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := c.declareAdopted(ctx, q.Config)
	if errors.Is(err, appliance.ErrConflict) {
		c.keepClash(q, err.Error())
		return nil
	}
	if err != nil {
		return err
	}
	// The hand-over holds serveMu: no other serve (the sync loop's, on
	// the declaration just applied) opens or marks the queue meanwhile.
	c.serveMu.Lock()
	defer c.serveMu.Unlock()
	c.localMu.Lock()
	moving := c.local[name].moving
	if moving == nil {
		moving = make(chan struct{})
		q.moving = moving
		c.local[name] = q
	}
	c.localMu.Unlock()
	// From here LogDir names the cluster's directory, so the broker's
	// delete keeps the logs; publishes and subscriptions wait (Owner).
	if b := c.boundBroker(); b != nil {
		if err := b.DeleteQueue(ctx, name); err != nil && !errors.Is(err, appliance.ErrNotFound) {
			return fmt.Errorf("close queue %s to hand it over: %w", name, err)
		}
	}
	c.undeclareLocked(name)
	c.fo.setServing(name, false)
	if err := c.moveAdoptedLogs(name, q.Dirs); err != nil {
		return err
	}
	if q.forget != nil {
		if err := q.forget(); err != nil {
			return fmt.Errorf("queue %s joined the cluster: %w", name, err)
		}
	}
	st := c.node.State()
	c.mayServe(st, name)
	if err := c.serveLocked(st, name); err != nil {
		return err
	}
	if _, served := c.declared[name]; !served {
		return fmt.Errorf("queue %s was not opened where the cluster keeps it", name)
	}
	c.localMu.Lock()
	delete(c.local, name)
	c.localMu.Unlock()
	close(moving)
	return nil
}

// keepClash keeps a queue waiting to join local for good: the cluster has
// a queue of its name.
func (c *Cluster) keepClash(q LocalQueue, reason string) {
	c.KeepLocal(q.Config, q.Dirs, reason)
	c.log.Warn("queue stays local and unreplicated: the cluster has a queue of that name; nothing is merged. "+
		"Clients of this node reach this queue, clients of other nodes the cluster's. To bring it along, drain it and "+
		"delete it here (fibril queue rm), or delete the cluster's queue and restart this node",
		"queue", q.Name, "reason", reason)
}

// declareLocal declares a local queue in this node's broker: the same
// declaration is answered as it stands, another refused, as a solo
// broker does.
func (c *Cluster) declareLocal(ctx context.Context, cfg appliance.QueueConfig) (control.Queue, bool, error) {
	b := c.boundBroker()
	if b == nil {
		return control.Queue{}, false, appliance.ErrUnavailable
	}
	res, err := b.Declare(ctx, cfg)
	if err != nil {
		return control.Queue{}, false, err
	}
	q := control.Queue{Config: res.Config}
	if res.Warning != "" {
		q.Warnings = []string{res.Warning}
	}
	return q, res.Created, nil
}

// deleteLocalQueue deletes a local queue, logs and all (the broker
// removes logs kept where a solo node keeps them): the name is the
// cluster's from then on.
func (c *Cluster) deleteLocalQueue(ctx context.Context, name string) error {
	b := c.boundBroker()
	if b == nil {
		return appliance.ErrUnavailable
	}
	if err := b.DeleteQueue(ctx, name); err != nil {
		return err
	}
	c.localMu.Lock()
	delete(c.local, name)
	c.localMu.Unlock()
	c.log.Info("local queue deleted; the name is the cluster's queue on this node too", "queue", name)
	return nil
}
