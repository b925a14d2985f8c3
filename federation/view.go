package federation

import (
	"sort"

	"github.com/fibril-edge/fibril/federation/control"
)

// View is what the admin API and the dashboard show of the cluster, as
// this node sees it.
type View struct {
	NodeID  string           `json:"node_id"`
	Leader  string           `json:"leader"` // "" while no leader is known
	Members []control.Member `json:"members"`
	Queues  []QueueView      `json:"queues"`
}

// QueueView is one cluster queue.
type QueueView struct {
	Name       string          `json:"name"`
	Durability string          `json:"durability"`
	Policy     string          `json:"policy"`
	Warnings   []string        `json:"warnings,omitempty"`
	Partitions []PartitionView `json:"partitions"`
}

// PartitionView is one partition's placement, its policy as it reads
// ("written on 2 of 3"), and, on the owner, each follower's progress with
// written and durable kept apart.
type PartitionView struct {
	Partition int      `json:"partition"`
	Owner     string   `json:"owner"`
	Followers []string `json:"followers"`
	Epoch     uint64   `json:"epoch"`
	Reads     string   `json:"reads"`
	// Ceiling is the visibility ceiling's follower part (next offset
	// that enough followers hold), on the owner only.
	Ceiling *uint64 `json:"ceiling,omitempty"`
	// Log is the owner's own copy (its written and durable ends), on the
	// owner only: the followers' progress reads against it.
	Log      *FollowerProgress           `json:"log,omitempty"`
	Progress map[string]FollowerProgress `json:"progress,omitempty"`
}

// FollowerProgress is one copy's position: written and durable ends, each
// one past the last record it covers.
type FollowerProgress struct {
	WrittenNext uint64 `json:"written_next"`
	DurableNext uint64 `json:"durable_next"`
	// CatchingUp: the follower is far behind and pulls synced batches
	// instead of being pushed records as they are written.
	CatchingUp bool `json:"catching_up,omitempty"`
}

// View builds the cluster view.
func (c *Cluster) View() View {
	st := c.node.State()
	leader, _ := c.node.Leader()
	v := View{NodeID: c.node.opts.ID, Leader: leader}
	for _, m := range st.Members {
		v.Members = append(v.Members, m)
	}
	sort.Slice(v.Members, func(i, j int) bool { return v.Members[i].ID < v.Members[j].ID })
	for name, q := range st.Queues {
		qv := QueueView{Name: name, Durability: q.Config.Durability.String(), Policy: q.Policy.String(), Warnings: q.Warnings}
		for _, a := range st.Assignments[name] {
			pv := PartitionView{Partition: a.Partition, Owner: a.Owner, Followers: a.Followers, Epoch: a.Epoch, Reads: a.Describe()}
			if op, g := c.ownedGate(name, a.Partition); g != nil {
				if ceil := g.Ceiling(); ceil != ^uint64(0) { // unbounded: the owner alone suffices
					pv.Ceiling = &ceil
				}
				pv.Log = &FollowerProgress{WrittenNext: op.log.WrittenNext(), DurableNext: op.log.DurableNext()}
				stats := op.streamStats()
				pv.Progress = map[string]FollowerProgress{}
				for f, p := range g.Positions() {
					pv.Progress[f] = FollowerProgress{WrittenNext: p.Written, DurableNext: p.Durable,
						CatchingUp: stats[f].CatchingUp}
				}
			}
			qv.Partitions = append(qv.Partitions, pv)
		}
		v.Queues = append(v.Queues, qv)
	}
	sort.Slice(v.Queues, func(i, j int) bool { return v.Queues[i].Name < v.Queues[j].Name })
	return v
}
