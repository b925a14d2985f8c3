package admin

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibril-edge/fibril/appliance"
)

// ClusterOps changes the cluster from the admin API: declarations and
// deletions go through the control plane (declarations with a replication
// policy), and a node can be asked to join a cluster through a peer.
type ClusterOps interface {
	DeclarePolicy(ctx context.Context, c appliance.QueueConfig, policy string) (ClusterDeclaration, bool, error)
	// DeleteQueue deletes a queue cluster-wide: its owner's broker and
	// every follower's copies follow. An unknown queue is an error that
	// matches appliance.ErrNotFound.
	DeleteQueue(ctx context.Context, name string) error
	JoinVia(ctx context.Context, peer string) error
	Owner(queue string) (id, addr string, ok bool)
	// ClusterSettings are the cluster-wide settings (replicas,
	// default_policy); SetClusterSettings changes them through the control
	// plane, refusing an unknown key or a bad value with an error that
	// matches appliance.ErrInvalid.
	ClusterSettings() map[string]string
	SetClusterSettings(ctx context.Context, kv map[string]string) error
}

// ClusterModes is implemented by a ClusterOps that changes queue modes
// cluster-wide: POST /api/queues/{name}/mode on a cluster node asks
// through it, and GET /api/queues/{name} reports its pending change.
type ClusterModes interface {
	// SetMode asks for the change and waits a while for it to take
	// effect; the declaration's ModeChange is set while it is pending.
	SetMode(ctx context.Context, name string, d appliance.Durability) (ClusterDeclaration, error)
	// PendingMode is the queue's pending change (nil when none) and the
	// mode in effect cluster-wide.
	PendingMode(name string) (*ClusterModeChange, string)
}

// getClusterSettings answers GET /api/cluster/settings.
func (s *Server) getClusterSettings(*http.Request) (int, any, error) {
	if s.opts.ClusterOps == nil {
		return 0, nil, errNotClustered
	}
	return http.StatusOK, map[string]any{"settings": s.opts.ClusterOps.ClusterSettings()}, nil
}

// putClusterSettings answers PUT /api/cluster/settings {"key": "value"}:
// the keys named change, cluster-wide; the reply is every setting.
func (s *Server) putClusterSettings(r *http.Request) (int, any, error) {
	if s.opts.ClusterOps == nil {
		return 0, nil, errNotClustered
	}
	var kv map[string]string
	if err := decode(r, maxRequest, &kv); err != nil {
		return 0, nil, err
	}
	if len(kv) == 0 {
		return 0, nil, invalid("no setting named: want {\"default_policy\": \"replica_buffered:2\"} or {\"replicas\": \"3\"}")
	}
	if err := s.opts.ClusterOps.SetClusterSettings(r.Context(), kv); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"settings": s.opts.ClusterOps.ClusterSettings()}, nil
}

// declareInCluster answers POST /api/queues on a cluster node. When this
// node serves the queue the reply is the usual queue view; otherwise the
// declaration and the node serving it.
func (s *Server) declareInCluster(r *http.Request, cfg appliance.QueueConfig, policy string) (int, any, error) {
	q, created, err := s.opts.ClusterOps.DeclarePolicy(r.Context(), cfg, policy)
	if err != nil {
		return 0, nil, err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	if in, err := s.b.QueueInfo(cfg.Name); err == nil {
		return status, declareReply{Created: created, Queue: viewQueue(in)}, nil
	}
	owner, addr, _ := s.opts.ClusterOps.Owner(cfg.Name)
	return status, map[string]any{"created": created, "queue": map[string]any{
		"name": q.Name, "durability": q.Durability, "partitions": q.Partitions,
		"policy": q.Policy, "warnings": q.Warnings, "served_by": owner, "served_at": addr,
	}}, nil
}

type joinRequest struct {
	Peer string `json:"peer"`
}

// joinCluster answers POST /api/cluster/join {"peer": "host:port"}.
func (s *Server) joinCluster(r *http.Request) (int, any, error) {
	if s.opts.ClusterOps == nil {
		return 0, nil, errNotClustered
	}
	var req joinRequest
	if err := decode(r, maxRequest, &req); err != nil {
		return 0, nil, err
	}
	if _, port, err := net.SplitHostPort(req.Peer); err != nil || port == "" {
		return 0, nil, invalid("peer %q: want the host:port of a member's cluster port", req.Peer)
	}
	if err := s.opts.ClusterOps.JoinVia(r.Context(), req.Peer); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"joined": true, "peer": req.Peer}, nil
}

// errNotClustered answers GET /api/cluster on a solo node.
var errNotClustered = &Error{Status: http.StatusNotFound, Code: "not_clustered",
	Err: errors.New("this node is not a cluster member")}

// getCluster answers GET /api/cluster: the cluster as this node sees it.
func (s *Server) getCluster(*http.Request) (int, any, error) {
	v, ok := s.clusterView()
	if !ok {
		return 0, nil, errNotClustered
	}
	// Empty lists rather than null, without touching the caller's slices.
	if v.Members == nil {
		v.Members = []Member{}
	}
	if v.Queues == nil {
		v.Queues = []ClusterQueue{}
	}
	return http.StatusOK, v, nil
}

// clusterView is Options.Cluster's answer; false on a solo node.
func (s *Server) clusterView() (ClusterView, bool) {
	if s.opts.Cluster == nil {
		return ClusterView{}, false
	}
	return s.opts.Cluster()
}

// clusterCollector exports the cluster's membership, leadership and, for
// the partitions this node owns, each follower's reported progress and the
// visibility ceiling. It is registered only when Options.Cluster is set,
// and exports nothing while Cluster answers false.
type clusterCollector struct {
	view func() (ClusterView, bool)
}

var (
	descClusterMembers   = desc("fibril_cluster_members", "Members of the cluster, voters or not.")
	descClusterIsLeader  = desc("fibril_cluster_is_leader", "1 while this node is the cluster's raft leader, else 0.")
	descClusterHasLeader = desc("fibril_cluster_has_leader", "1 while this node knows a cluster leader, else 0.")
	descHandshaking      = desc("fibril_cluster_handshaking",
		"Connections to this node's cluster port that have not completed their handshake (TLS and protocol byte).")
	descHandshakesEvicted = desc("fibril_cluster_handshakes_evicted_total",
		"Connections to the cluster port closed during their handshake to make room for newer ones (cluster port limits per source and in total).")
	descFollowerNext = desc("fibril_replica_follower_next",
		"Next offset a follower of a partition this node owns reports, at the boundary written (handed to its operating system) or durable (synced).",
		"queue", "mode", "partition", "follower", "boundary")
	descPartitionEpoch = desc("fibril_cluster_partition_epoch",
		"Epoch of a cluster partition's assignment: it rises at every failover.", partitionLabels...)
	descPartitionRecovering = desc("fibril_cluster_partition_recovering",
		"1 while a recovery is installing the partition's epoch (no owner serves it), else 0.", partitionLabels...)
	descFailoverSeconds = desc("fibril_cluster_last_failover_seconds",
		"How long the queue's last failover took, from its start to the new owner's install.", queueLabels...)
	descFailoverTime = desc("fibril_cluster_last_failover_timestamp_seconds",
		"When the queue's last failover started (unix seconds).", queueLabels...)
	descClusterModePending = desc("fibril_cluster_queue_mode_change_pending",
		"1 while a change of the queue's mode is asked for and not in effect (mode: the mode in effect; to: the one asked for), else 0.",
		"queue", "mode", "to")
	descClusterLocalQueues = desc("fibril_cluster_local_queues",
		"Queues this node served solo and serves outside the cluster, unreplicated: joining until it is a member, or kept because the cluster has a queue of the name.",
		"joining")
	descReplicaCeiling = desc("fibril_replica_ceiling",
		"Visibility ceiling of a partition this node owns: the next offset enough followers hold for its policy; nothing at or above it is delivered. Absent when the owner alone suffices.",
		partitionLabels...)
)

// Describe implements prometheus.Collector.
func (c clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descClusterMembers, descClusterIsLeader, descClusterHasLeader, descHandshaking, descHandshakesEvicted,
		descFollowerNext, descReplicaCeiling,
		descPartitionEpoch, descPartitionRecovering, descFailoverSeconds, descFailoverTime, descClusterModePending, descClusterLocalQueues} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c clusterCollector) Collect(ch chan<- prometheus.Metric) {
	v, ok := c.view()
	if !ok {
		return
	}
	gauge := func(d *prometheus.Desc, x float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, x, labels...)
	}
	gauge(descClusterMembers, float64(len(v.Members)))
	gauge(descClusterIsLeader, bool01(v.Leader != "" && v.Leader == v.NodeID))
	gauge(descClusterHasLeader, bool01(v.Leader != ""))
	gauge(descHandshaking, float64(v.Handshaking))
	ch <- prometheus.MustNewConstMetric(descHandshakesEvicted, prometheus.CounterValue, float64(v.HandshakesEvicted))
	joining := 0
	for _, l := range v.LocalQueues {
		if l.Joining {
			joining++
		}
	}
	gauge(descClusterLocalQueues, float64(joining), "true")
	gauge(descClusterLocalQueues, float64(len(v.LocalQueues)-joining), "false")
	for _, q := range v.Queues {
		if m := q.ModeChange; m != nil {
			gauge(descClusterModePending, 1, q.Name, q.Durability, m.To)
		}
		mode := q.Durability
		if f := q.LastFailover; f != nil {
			gauge(descFailoverTime, float64(f.StartedAt.UnixNano())/1e9, q.Name, mode)
			if !f.InstalledAt.IsZero() {
				gauge(descFailoverSeconds, f.InstalledAt.Sub(f.StartedAt).Seconds(), q.Name, mode)
			}
		}
		for _, p := range q.Partitions {
			idx := strconv.Itoa(p.Partition)
			gauge(descPartitionEpoch, float64(p.Epoch), q.Name, mode, idx)
			gauge(descPartitionRecovering, bool01(p.Recovering), q.Name, mode, idx)
			for f, pr := range p.Progress {
				gauge(descFollowerNext, float64(pr.WrittenNext), q.Name, mode, idx, f, "written")
				gauge(descFollowerNext, float64(pr.DurableNext), q.Name, mode, idx, f, "durable")
			}
			if p.Ceiling != nil {
				gauge(descReplicaCeiling, float64(*p.Ceiling), q.Name, mode, idx)
			}
		}
	}
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
