package daemon

import (
	"context"
	"maps"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/admin"
	"github.com/fibril-edge/fibril/federation"
)

// clusterOps is the cluster as the admin API changes it: declarations,
// deletions and joins go through the control plane.
type clusterOps struct{ *federation.Cluster }

var _ admin.ClusterOps = clusterOps{}

// ClusterSettings are the cluster-wide settings as this node's state has
// them.
func (c clusterOps) ClusterSettings() map[string]string {
	return maps.Clone(c.Node().State().Settings)
}

// SetClusterSettings changes cluster-wide settings through the control
// plane.
func (c clusterOps) SetClusterSettings(ctx context.Context, kv map[string]string) error {
	return c.Node().SetSettings(ctx, kv)
}

// DeclarePolicy declares a queue through the control plane and answers
// the stored declaration as the admin API renders it.
func (c clusterOps) DeclarePolicy(ctx context.Context, cfg appliance.QueueConfig, policy string) (admin.ClusterDeclaration, bool, error) {
	q, created, err := c.Cluster.DeclarePolicy(ctx, cfg, policy)
	if err != nil {
		return admin.ClusterDeclaration{}, false, err
	}
	return admin.ClusterDeclaration{Name: q.Config.Name, Durability: q.Config.Durability.String(),
		Partitions: q.Config.Partitions, Policy: q.Policy.String(), Warnings: q.Warnings}, created, nil
}

var _ admin.ClusterModes = clusterOps{}

// SetMode asks for a queue's mode to change cluster-wide (the owner
// carries it out) and answers the declaration, with the change while it
// is pending.
func (c clusterOps) SetMode(ctx context.Context, name string, d appliance.Durability) (admin.ClusterDeclaration, error) {
	q, _, err := c.Cluster.SetMode(ctx, name, d)
	if err != nil {
		return admin.ClusterDeclaration{}, err
	}
	return admin.ClusterDeclaration{Name: q.Config.Name, Durability: q.Config.Durability.String(),
		Partitions: q.Config.Partitions, Policy: q.Policy.String(), Warnings: q.Warnings,
		ModeChange: federation.ModeChangeView(q.ModeChange)}, nil
}

// PendingMode is a queue's pending mode change and the mode in effect, as
// this node's control state has them.
func (c clusterOps) PendingMode(name string) (*admin.ClusterModeChange, string) {
	q, ok := c.Node().State().Queues[name]
	if !ok {
		return nil, ""
	}
	return federation.ModeChangeView(q.ModeChange), q.Config.Durability.String()
}
