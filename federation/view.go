package federation

import (
	"sort"
	"time"

	"github.com/fibril-edge/fibril/appliance/admin"
	"github.com/fibril-edge/fibril/federation/control"
)

// View builds the cluster view the admin API renders.
func (c *Cluster) View() admin.ClusterView {
	st := c.node.State()
	leader, _ := c.node.Leader()
	v := admin.ClusterView{NodeID: c.node.opts.ID, Leader: leader,
		Handshaking: c.node.mux.pending.Len(), HandshakesEvicted: c.node.mux.pending.Evicted()}
	for _, m := range st.Members {
		v.Members = append(v.Members, admin.Member{ID: m.ID, ClusterAddr: m.ClusterAddr, ClientAddr: m.ClientAddr, Voter: m.Voter})
	}
	sort.Slice(v.Members, func(i, j int) bool { return v.Members[i].ID < v.Members[j].ID })
	for name, q := range st.Queues {
		qv := admin.ClusterQueue{Name: name, Durability: q.Config.Durability.String(), Policy: q.Policy.String(), Warnings: q.Warnings}
		if f := q.LastFailover; f != nil {
			lf := &admin.Failover{Epoch: f.Epoch, From: f.From, To: f.To, Reason: f.Reason, StartedAt: time.Unix(0, f.StartedAt).UTC()}
			if f.InstalledAt != 0 {
				lf.InstalledAt = time.Unix(0, f.InstalledAt).UTC()
				lf.DurationMs = lf.InstalledAt.Sub(lf.StartedAt).Milliseconds()
			}
			qv.LastFailover = lf
		}
		qv.ModeChange = ModeChangeView(q.ModeChange)
		for _, a := range st.Assignments[name] {
			pv := admin.ClusterPartition{Partition: a.Partition, Owner: a.Owner, Followers: a.Followers, Epoch: a.Epoch, Reads: a.Describe(q.Config.Durability)}
			if a.Sealing {
				pv.Recovering, pv.Sealed, pv.SealsNeeded = true, a.Witnesses(q.Config.Durability), a.SealsNeeded()
				for _, sl := range a.Seals {
					if sl.Witness {
						pv.CutSealed++
					}
				}
				pv.CutSealed -= pv.Sealed
			}
			if op, g := c.ownedGate(name, a.Partition); g != nil {
				if ceil := g.Ceiling(); ceil != ^uint64(0) { // unbounded: the owner alone suffices
					pv.Ceiling = &ceil
				}
				pv.Log = &admin.CopyProgress{WrittenNext: op.log.WrittenNext(), DurableNext: op.log.DurableNext()}
				pv.Mode = op.mode().String()
				stats := op.streamStats()
				pv.Progress = map[string]admin.CopyProgress{}
				for f, p := range g.Positions() {
					pv.Progress[f] = admin.CopyProgress{WrittenNext: p.Written, DurableNext: p.Durable,
						CatchingUp: stats[f].CatchingUp, Refused: stats[f].LastRefusal}
				}
			}
			qv.Partitions = append(qv.Partitions, pv)
		}
		v.Queues = append(v.Queues, qv)
	}
	sort.Slice(v.Queues, func(i, j int) bool { return v.Queues[i].Name < v.Queues[j].Name })
	for _, q := range c.LocalQueues() {
		v.LocalQueues = append(v.LocalQueues, admin.LocalQueue{Name: q.Name, Reason: q.Reason, Joining: q.Joining})
	}
	return v
}

// ModeChangeView is a pending mode change as the admin API renders it;
// nil when none is pending.
func ModeChangeView(m *control.ModeChange) *admin.ClusterModeChange {
	if m == nil {
		return nil
	}
	return &admin.ClusterModeChange{To: m.To.String(), Since: time.Unix(0, m.Since).UTC()}
}
