package admin

import "time"

// The view types below are what the admin API renders for the parts of
// the daemon that live outside the solo broker: the cluster and the NATS
// bridges. The admin package owns them, so the solo broker's folder
// depends on neither the cluster nor the bridge; the daemon's composition
// root hands in functions that fill them (federation builds ClusterView,
// the bridges' reports become BridgeStats).

// ClusterView is the cluster as one node sees it: GET /api/cluster, the
// fibril_cluster_ and fibril_replica_ metrics, the dashboard's Cluster page
// and `fibril cluster status`.
type ClusterView struct {
	NodeID  string         `json:"node_id"`
	Leader  string         `json:"leader"` // "" while no leader is known
	Members []Member       `json:"members"`
	Queues  []ClusterQueue `json:"queues"`
	// Handshaking is the connections to this node's cluster port that
	// have not completed their handshake (TLS and protocol byte);
	// HandshakesEvicted, how many of those were closed to make room for
	// newer ones (a flood).
	Handshaking       int    `json:"handshaking"`
	HandshakesEvicted uint64 `json:"handshakes_evicted"`
	// LocalQueues are the queues this node served solo and serves,
	// unreplicated, outside the cluster: until this node is a member, or,
	// for good, because the cluster has a queue of the same name (until
	// the operator decides).
	LocalQueues []LocalQueue `json:"local_queues,omitempty"`
}

// LocalQueue is a queue a node keeps out of the cluster, and why.
type LocalQueue struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
	// Joining: it joins the cluster once this node is a member; false
	// for a name clash, which stays until the operator decides.
	Joining bool `json:"joining,omitempty"`
}

// Member is one member of the cluster.
type Member struct {
	ID string `json:"id"`
	// ClusterAddr is the node's cluster port (raft, control requests and
	// replication), host:port.
	ClusterAddr string `json:"cluster_addr"`
	// ClientAddr is its client protocol address, host:port.
	ClientAddr string `json:"client_addr,omitempty"`
	Voter      bool   `json:"voter"`
}

// ClusterQueue is one cluster queue.
type ClusterQueue struct {
	Name       string             `json:"name"`
	Durability string             `json:"durability"`
	Policy     string             `json:"policy"`
	Warnings   []string           `json:"warnings,omitempty"`
	Partitions []ClusterPartition `json:"partitions"`
	// LastFailover is the queue's latest recovery, nil before the first.
	LastFailover *Failover `json:"last_failover,omitempty"`
	// ModeChange is a change of mode asked for and not in effect yet
	// (Durability is the mode in effect); nil when none is pending. Its
	// owner carries it out: a change to durable takes effect once every
	// required copy holds durable what was written before it.
	ModeChange *ClusterModeChange `json:"mode_change,omitempty"`
}

// ClusterModeChange is a pending change of a cluster queue's mode.
type ClusterModeChange struct {
	To    string    `json:"to"`
	Since time.Time `json:"since"`
}

// Failover is a queue's latest recovery: the epoch it installed, the
// owners before and after, why it started, when, and how long it took
// (InstalledAt and DurationMs are zero while it is under way).
type Failover struct {
	Epoch       uint64    `json:"epoch"`
	From        string    `json:"from"`
	To          string    `json:"to,omitempty"`
	Reason      string    `json:"reason"`
	StartedAt   time.Time `json:"started_at"`
	InstalledAt time.Time `json:"installed_at,omitzero"`
	DurationMs  int64     `json:"duration_ms,omitempty"`
}

// ClusterPartition is one partition's placement, its policy as it reads
// ("written on 2 of 3"), and, on the owner, each follower's progress with
// written and durable kept apart.
type ClusterPartition struct {
	Partition int      `json:"partition"`
	Owner     string   `json:"owner"`
	Followers []string `json:"followers"`
	Epoch     uint64   `json:"epoch"`
	Reads     string   `json:"reads"`
	// Recovering: a recovery is installing Epoch; no owner serves the
	// partition until Sealed reaches SealsNeeded (E-W+1 witnesses), or
	// every copy has sealed. CutSealed counts the copies that sealed but
	// do not count (a buffered queue's copies back from a power loss or a
	// restart, which may have lost what they had not synced): with any,
	// the recovery may be waiting for every copy.
	Recovering  bool `json:"recovering,omitempty"`
	Sealed      int  `json:"sealed,omitempty"`
	SealsNeeded int  `json:"seals_needed,omitempty"`
	CutSealed   int  `json:"cut_sealed,omitempty"`
	// Ceiling is the visibility ceiling's follower part (next offset
	// that enough followers hold), on the owner only.
	Ceiling *uint64 `json:"ceiling,omitempty"`
	// Log is the owner's own copy (its written and durable ends), on the
	// owner only: the followers' progress reads against it.
	Log      *CopyProgress           `json:"log,omitempty"`
	Progress map[string]CopyProgress `json:"progress,omitempty"`
	// Mode is the mode the owner applies to the partition now, its gate
	// and its followers' streams (on the owner only): it leads the
	// queue's durability while a change to durable waits for the copies.
	Mode string `json:"mode,omitempty"`
}

// CopyProgress is one copy's position: written and durable ends, each one
// past the last record it covers.
type CopyProgress struct {
	WrittenNext uint64 `json:"written_next"`
	DurableNext uint64 `json:"durable_next"`
	// CatchingUp: the follower is far behind and pulls synced batches
	// instead of being pushed records as they are written.
	CatchingUp bool `json:"catching_up,omitempty"`
	// Refused is why the follower refuses the owner's stream (for example
	// a copy that diverged from the owner's log), "" while it takes it; a
	// refused follower is not counted by the gate.
	Refused string `json:"refused,omitempty"`
}

// ClusterDeclaration is what a declaration through the control plane
// answers: the stored declaration with its policy.
type ClusterDeclaration struct {
	Name       string
	Durability string // "durable" or "buffered": the mode in effect
	Partitions int
	Policy     string
	Warnings   []string
	// ModeChange is a change of mode asked for and not in effect yet.
	ModeChange *ClusterModeChange
}

// Bridge connection states, as BridgeStats.State reports them.
const (
	BridgeStarting     = "starting"
	BridgeConnected    = "connected"
	BridgeReconnecting = "reconnecting"
	BridgeStopped      = "stopped"
)

// BridgeStats is one NATS bridge's state and counters: GET /api/bridges,
// the fibril_bridge_ metrics and the dashboard's Bridges page.
type BridgeStats struct {
	Name  string `json:"name"`
	State string `json:"state"` // BridgeStarting, BridgeConnected, BridgeReconnecting, BridgeStopped
	// URLs are the NATS servers the bridge dials, credentials left out;
	// Routes say what it is configured to move, one line per ingest and
	// egress.
	URLs   []string `json:"urls"`
	Routes []string `json:"routes"`
	// LastError is the last NATS or Fibril error the bridge logged, "" for none.
	LastError string `json:"last_error"`
	// Reconnects counts NATS reconnects.
	Reconnects uint64 `json:"reconnects"`
	// MissingQueues lists, sorted, the queues the broker said do not
	// exist (an ingest blocked or dropping for one, an egress retrying its
	// subscription). Never nil.
	MissingQueues []string `json:"missing_queues"`

	// Received counts messages taken from NATS by ingests (JetStream
	// redeliveries included).
	Received uint64 `json:"received"`
	// Published counts messages Fibril confirmed (stored at the queue's
	// durability), Duplicates those it confirmed as repeats within the
	// dedupe window.
	Published  uint64 `json:"published"`
	Duplicates uint64 `json:"duplicates"`
	// Dropped counts core messages given up, by reason (the broker's error
	// code, "no_queue" for a subject the mapping cannot name a queue for).
	Dropped map[string]uint64 `json:"dropped"`
	// Retries counts publishes retried because the queue refused them
	// (full) or the Fibril connection was lost; Blocked is true while a
	// JetStream ingest waits for its queue to take a message.
	Retries uint64 `json:"retries"`
	Blocked bool   `json:"blocked"`
	// JetStreamAcked counts JetStream acks sent after the Fibril confirm.
	JetStreamAcked uint64 `json:"jetstream_acked"`

	// Egressed counts Fibril messages NATS accepted and that were then
	// acked; EgressFailed those released for redelivery because NATS
	// did not accept them.
	Egressed     uint64 `json:"egressed"`
	EgressFailed uint64 `json:"egress_failed"`
}
