package control

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/fibril-edge/fibril/appliance"
)

// Limits and defaults of the control plane.
const (
	// MaxReplicas bounds a partition's copies, owner included.
	MaxReplicas = 7
	// DefaultReplicas is the replication factor when the cluster setting
	// "replicas" is unset; fewer members than this means one copy per member.
	DefaultReplicas = 3
)

// Errors callers tell apart.
var (
	// ErrNotEnoughMembers: the policy needs more replicas than the
	// cluster has members.
	ErrNotEnoughMembers = fmt.Errorf("not enough cluster members for the policy: %w", appliance.ErrInvalid)
	// ErrUnknownQueue: no such queue in the cluster.
	ErrUnknownQueue = fmt.Errorf("unknown cluster queue: %w", appliance.ErrNotFound)
	// ErrUnknownSetting: not a cluster setting.
	ErrUnknownSetting = fmt.Errorf("unknown cluster setting: %w", appliance.ErrInvalid)
)

// Member is a node of the cluster. Voters take part in raft; every member
// can host replicas.
type Member struct {
	ID string `json:"id"`
	// ClusterAddr is the node's cluster port (raft, control requests and
	// replication), host:port.
	ClusterAddr string `json:"cluster_addr"`
	// ClientAddr is its client protocol address, host:port.
	ClientAddr string `json:"client_addr,omitempty"`
	Voter      bool   `json:"voter"`
}

// Queue is a cluster queue declaration with its policy.
type Queue struct {
	Config appliance.QueueConfig `json:"config"`
	Policy Policy                `json:"policy"`
	// Warning carries the buffered-mode warning and any policy
	// deprecation warning.
	Warnings []string `json:"warnings,omitempty"`
	// DefaultPolicy: the queue was declared without a policy, so its
	// policy is the cluster's default for its mode (a majority of the
	// copies) and follows the copy count as followers are added.
	DefaultPolicy bool `json:"default_policy,omitempty"`
	// Incarnation tells this declaration apart from an earlier or later
	// queue of the same name: the raft log index of the command that
	// created it, the same on every node.
	Incarnation uint64 `json:"incarnation,omitempty"`
	// LastFailover is the queue's latest recovery, nil before the first.
	LastFailover *Failover `json:"last_failover,omitempty"`
	// AdoptedFrom names the node that brought the queue along, with its
	// messages, when it joined the cluster (see adopt); "" for a queue
	// declared in the cluster.
	AdoptedFrom string `json:"adopted_from,omitempty"`
	// ModeChange is a change of mode asked for and not in effect yet
	// (mode.go); nil when none is pending.
	ModeChange *ModeChange `json:"mode_change,omitempty"`
}

// Assignment places one queue partition: its owner, its followers and the
// epoch of that placement. The epoch rises whenever the owner changes (part
// recovery.go); the replication handshake carries it. Followers only grow
// while the owner stays (see fill): a member joining, or the replicas
// setting rising, adds followers under the same epoch, and the owner
// notices by comparing the list, so no separate counter is kept.
type Assignment struct {
	Queue     string   `json:"queue"`
	Partition int      `json:"partition"`
	Owner     string   `json:"owner"`
	Followers []string `json:"followers"`
	Epoch     uint64   `json:"epoch"`
	Policy    Policy   `json:"policy"`
	// Incarnation is the queue's (see Queue.Incarnation): copies of a
	// queue deleted and declared again under the same name differ in it.
	Incarnation uint64 `json:"incarnation,omitempty"`
	// Sealing: a recovery is installing Epoch (recovery.go). No owner
	// serves the partition meanwhile; Owner is the last one, and Seals
	// are the copies' reports so far.
	Sealing bool   `json:"sealing,omitempty"`
	Seals   []Seal `json:"seals,omitempty"`
	// TailFrom and TailTo, while sealing: no witness is best in every
	// partition, so TailTo, the one chosen to own the queue, takes this
	// partition's better tail from TailFrom's copy and seals again.
	TailFrom string `json:"tail_from,omitempty"`
	TailTo   string `json:"tail_to,omitempty"`
}

// Replicas is the partition's copy count, owner included.
func (a Assignment) Replicas() int { return 1 + len(a.Followers) }

// Describe is the partition's policy as it reads: "written on 2 of 3".
func (a Assignment) Describe(mode appliance.Durability) string {
	return a.Policy.Describe(mode, a.Replicas())
}

// State is the replicated state machine's content. It is changed only by
// apply, on the raft goroutine; readers get copies.
type State struct {
	Members     map[string]Member       `json:"members"`
	Queues      map[string]Queue        `json:"queues"`
	Assignments map[string][]Assignment `json:"assignments"` // by queue, index = partition
	Settings    map[string]string       `json:"settings"`
	// Applied is the raft log index of the last command applied (0
	// before the first); a snapshot carries it.
	Applied uint64 `json:"applied,omitempty"`
}

func newState() *State {
	return &State{Members: map[string]Member{}, Queues: map[string]Queue{},
		Assignments: map[string][]Assignment{}, Settings: map[string]string{}}
}

// check refuses a state apply could never have made, and makes missing
// maps empty. A restored snapshot is read from the leader's bytes; a
// state that broke these would fail later, far from its cause.
func (s *State) check() error {
	if s.Members == nil {
		s.Members = map[string]Member{}
	}
	if s.Queues == nil {
		s.Queues = map[string]Queue{}
	}
	if s.Assignments == nil {
		s.Assignments = map[string][]Assignment{}
	}
	if s.Settings == nil {
		s.Settings = map[string]string{}
	}
	for id, m := range s.Members {
		if id == "" || m.ID != id {
			return fmt.Errorf("%w: member %q listed as %q", appliance.ErrInvalid, m.ID, id)
		}
	}
	for name, q := range s.Queues {
		as := s.Assignments[name]
		if q.Config.Name != name || q.Config.Partitions < 1 || len(as) != q.Config.Partitions {
			return fmt.Errorf("%w: queue %q (named %q) has %d partitions and %d assignments",
				appliance.ErrInvalid, name, q.Config.Name, q.Config.Partitions, len(as))
		}
		for i, a := range as {
			if a.Queue != name || a.Partition != i {
				return fmt.Errorf("%w: queue %q's assignment %d is for %s/%d", appliance.ErrInvalid, name, i, a.Queue, a.Partition)
			}
		}
	}
	for name := range s.Assignments {
		if _, ok := s.Queues[name]; !ok {
			return fmt.Errorf("%w: assignments for queue %q, which is not declared", appliance.ErrInvalid, name)
		}
	}
	return nil
}

// derive starts the next state from s for Apply: the maps are copied,
// the entries shared with s, which is published and must not change. A
// command changes an entry by storing a new value under its key, and a
// queue's assignments in place only once it owns them (ownAssignments).
func (s *State) derive() *State {
	return &State{Members: maps.Clone(s.Members), Queues: maps.Clone(s.Queues),
		Assignments: maps.Clone(s.Assignments), Settings: maps.Clone(s.Settings), Applied: s.Applied}
}

// ownAssignments replaces queue's assignments in s with a deep copy and
// returns it, for a command to change in place: the list it replaces may
// be shared with a published state (derive).
func (s *State) ownAssignments(queue string) []Assignment {
	as := slices.Clone(s.Assignments[queue])
	for i := range as {
		as[i].Followers = slices.Clone(as[i].Followers)
		as[i].Seals = slices.Clone(as[i].Seals)
	}
	if as != nil {
		s.Assignments[queue] = as
	}
	return as
}

// clone deep-copies the state for a caller of FSM.State, which may
// change it. Every list of warnings, assignments and followers is cut
// from one array of each (capacity limited, so an append to one
// reallocates): a state with 1,000 queues takes a handful of
// allocations, not one per slice (BenchmarkStateClone).
func (s *State) clone() *State {
	c := &State{Members: maps.Clone(s.Members), Settings: maps.Clone(s.Settings), Applied: s.Applied,
		Queues: maps.Clone(s.Queues)}
	var nWarn int
	for _, q := range s.Queues {
		nWarn += len(q.Warnings)
	}
	warns := make([]string, 0, nWarn)
	for k, v := range s.Queues {
		if v.Warnings == nil && v.LastFailover == nil && v.ModeChange == nil {
			continue
		}
		if v.Warnings != nil {
			w := len(warns)
			warns = append(warns, v.Warnings...)
			v.Warnings = warns[w:len(warns):len(warns)]
		}
		if v.LastFailover != nil {
			f := *v.LastFailover
			v.LastFailover = &f
		}
		if v.ModeChange != nil {
			m := *v.ModeChange
			v.ModeChange = &m
		}
		c.Queues[k] = v
	}
	var nAssign, nFollow int
	for _, as := range s.Assignments {
		nAssign += len(as)
		for _, a := range as {
			nFollow += len(a.Followers)
		}
	}
	assigns, follows := make([]Assignment, 0, nAssign), make([]string, 0, nFollow)
	c.Assignments = make(map[string][]Assignment, len(s.Assignments))
	for k, as := range s.Assignments {
		if as == nil {
			c.Assignments[k] = nil
			continue
		}
		from := len(assigns)
		for _, a := range as {
			if a.Followers != nil {
				f := len(follows)
				follows = append(follows, a.Followers...)
				a.Followers = follows[f:len(follows):len(follows)]
			}
			a.Seals = slices.Clone(a.Seals)
			assigns = append(assigns, a)
		}
		c.Assignments[k] = assigns[from:len(assigns):len(assigns)]
	}
	return c
}

// Settings a cluster keeps, with their checks.
var settingChecks = map[string]func(string) error{
	// replicas: copies per partition, owner included (1..MaxReplicas).
	"replicas": func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxReplicas {
			return fmt.Errorf("replicas %q: want 1 to %d", v, MaxReplicas)
		}
		return nil
	},
	// default_policy: the policy, and through it the mode, of a queue
	// declared without either (unset: durable, a majority of the copies).
	"default_policy": func(v string) error {
		if v == "" {
			return nil
		}
		_, _, err := ParsePolicy(v)
		return err
	},
}

// clusterDefault is the default_policy setting; zero when unset.
func (s *State) clusterDefault() Policy {
	p, _, _ := ParsePolicy(s.Settings["default_policy"]) // checked when set
	return p
}

// replicas is the cluster's replication factor: the copies a new
// partition gets, and the copies fill tops existing partitions up to.
func (s *State) replicas() int {
	n := DefaultReplicas
	if v, ok := s.Settings["replicas"]; ok {
		n, _ = strconv.Atoi(v)
	}
	return min(n, len(s.Members))
}

func (s *State) addMember(m Member) error {
	if m.ID == "" || m.ClusterAddr == "" {
		return fmt.Errorf("%w: a member needs an id and a cluster address", appliance.ErrInvalid)
	}
	s.Members[m.ID] = m
	s.fill()
	return nil
}

func (s *State) removeMember(id string) error {
	for q, as := range s.Assignments {
		for _, a := range as {
			if a.Owner == id || slices.Contains(a.Followers, id) {
				return fmt.Errorf("%w: member %s still hosts %s/%d", appliance.ErrConflict, id, q, a.Partition)
			}
		}
	}
	delete(s.Members, id)
	return nil
}

func (s *State) setSettings(kv map[string]string) error {
	for k, v := range kv {
		check, ok := settingChecks[k]
		if !ok {
			return fmt.Errorf("%w: %q", ErrUnknownSetting, k)
		}
		if err := check(v); err != nil {
			return fmt.Errorf("%w: %w", appliance.ErrInvalid, err)
		}
	}
	for k, v := range kv {
		s.Settings[k] = v
	}
	s.fill() // a higher replicas setting gives partitions more copies
	return nil
}

// declare applies a declaration with the cluster's rules: the mode is
// fixed by the first declare, cluster-wide. A new queue declared without a
// mode takes the one its policy implies (buffered for replica_buffered,
// durable otherwise), or the cluster's default_policy's, or durable: the
// default stays durable unless the operator sets a cluster default. The
// mode and the count stay separate: majority_durable or replica_durable:N
// on a buffered queue counts written copies; only replica_buffered names a
// mode, and it cannot go with a durable queue. A new queue is placed at
// once, its incarnation the index of the command being applied
// (s.Applied).
func (s *State) declare(c appliance.QueueConfig, p Policy, warnings []string) (Queue, bool, error) {
	return s.declareOn(c, p, warnings, "")
}

// adopt declares a queue that node owner brings along, messages and all,
// when it joins the cluster: owner keeps serving it (it holds the log),
// and followers are placed and catch up as for any new queue. A name the
// cluster already has is a conflict, nothing merged, unless it is this
// very adoption already applied (the same node and configuration: the
// node retries after a crash).
func (s *State) adopt(c appliance.QueueConfig, owner string) (Queue, bool, error) {
	if err := c.Validate(); err != nil {
		return Queue{}, false, err
	}
	if _, ok := s.Members[owner]; !ok {
		return Queue{}, false, fmt.Errorf("%w: node %s brings queue %s along but is not a member", appliance.ErrInvalid, owner, c.Name)
	}
	c = c.WithDefaults()
	if q, ok := s.Queues[c.Name]; ok {
		if q.AdoptedFrom == owner && q.Config == c {
			return q, false, nil
		}
		return Queue{}, false, fmt.Errorf("%w: node %s brings queue %s (%s, %d partitions) along, but the cluster already has a queue of that name (%s, %d partitions, owned by %s)",
			appliance.ErrConflict, owner, c.Name, c.Durability, c.Partitions, q.Config.Durability, q.Config.Partitions, s.ownerOf(c.Name))
	}
	if dl := s.ownerOf(c.DeadLetter); dl != "" && dl != owner {
		return Queue{}, false, s.colocate(c, owner)
	}
	q, created, err := s.declareOn(c, Policy{}, nil, owner)
	if err != nil {
		return q, created, err
	}
	q.AdoptedFrom = owner
	s.Queues[c.Name] = q
	return q, created, nil
}

// declareOn is declare with the owner of a new queue chosen: "" lets
// placement choose (beside its dead-letter queue, if that has an owner).
func (s *State) declareOn(c appliance.QueueConfig, p Policy, warnings []string, owner string) (Queue, bool, error) {
	if err := c.Validate(); err != nil {
		return Queue{}, false, err
	}
	if p.Kind == ReplicaBuffered && c.Durability == appliance.Durable {
		return Queue{}, false, fmt.Errorf("%w: policy %s names a buffered queue, not a durable one (replica_durable:%d counts the same copies)",
			appliance.ErrInvalid, p, p.N)
	}
	if c.Durability == appliance.DurabilityUnspecified && !p.IsZero() {
		c.Durability = p.Durability()
	}
	if q, ok := s.Queues[c.Name]; ok {
		merged, err := q.Config.Merge(c)
		if err != nil {
			return Queue{}, false, err
		}
		if !p.IsZero() && p != q.Policy {
			return Queue{}, false, fmt.Errorf("%w: queue %s has policy %s, not %s", appliance.ErrConflict, c.Name, q.Policy, p)
		}
		owner := s.Assignments[c.Name][0].Owner
		if err := s.colocate(merged, owner); err != nil {
			return Queue{}, false, err
		}
		q.Config = merged
		s.Queues[c.Name] = q
		s.declareDeadLetter(merged, owner)
		return q, false, nil
	}
	cd := s.clusterDefault()
	if c.Durability == appliance.DurabilityUnspecified {
		c.Durability = appliance.Durable
		if !cd.IsZero() {
			c.Durability = cd.Durability()
		}
	}
	c = c.WithDefaults()
	replicas := s.replicas()
	defaulted := p.IsZero() && cd.IsZero()
	switch {
	case defaulted:
		p = defaultPolicy(c.Durability, replicas)
	case p.IsZero() && cd.Kind == ReplicaBuffered && c.Durability == appliance.Durable:
		p = Policy{Kind: ReplicaDurable, N: cd.N} // the cluster's count, in the mode the declare named
	case p.IsZero():
		p = cd
	}
	if need := p.Required(replicas); need > replicas || replicas == 0 {
		return Queue{}, false, fmt.Errorf("%w: policy %s needs %d copies, the cluster places %d",
			ErrNotEnoughMembers, p, need, replicas)
	}
	if c.Durability == appliance.Buffered {
		warnings = append(warnings, appliance.BufferedWarning)
	}
	q := Queue{Config: c, Policy: p, Warnings: warnings, DefaultPolicy: defaulted, Incarnation: s.Applied}
	s.Queues[c.Name] = q
	if owner == "" {
		owner = s.ownerOf(c.DeadLetter)
	}
	s.Assignments[c.Name] = s.place(c.Name, c.Partitions, replicas, p, owner)
	for i := range s.Assignments[c.Name] {
		s.Assignments[c.Name][i].Incarnation = q.Incarnation
	}
	s.declareDeadLetter(c, s.Assignments[c.Name][0].Owner)
	return q, true, nil
}

// A queue and its dead-letter queue share an owner: the owner's broker
// copies a rejected message into the dead-letter queue itself, through
// its gate, so the copy is replicated like any publish. A new queue is
// placed on its dead-letter queue's owner; a dead-letter queue not
// declared yet is declared with the queue, on its owner, in its mode, with
// the default policy.

// ownerOf is a queue's owner, "" when the queue is not declared.
func (s *State) ownerOf(queue string) string {
	if as := s.Assignments[queue]; len(as) > 0 {
		return as[0].Owner
	}
	return ""
}

// OwnedBy reports whether queue's assignment names node id its owner with
// no recovery under way (not sealing): id is the node that serves it.
func (s *State) OwnedBy(queue, id string) bool {
	as := s.Assignments[queue]
	return len(as) > 0 && !as[0].Sealing && as[0].Owner == id
}

// DeadLetterQueues is the set of queues some queue names as its
// dead-letter queue.
func (s *State) DeadLetterQueues() map[string]bool {
	out := map[string]bool{}
	for _, q := range s.Queues {
		if dl := q.Config.DeadLetter; dl != "" {
			out[dl] = true
		}
	}
	return out
}

// colocate refuses to give a queue owned by owner a dead-letter queue
// another node owns.
func (s *State) colocate(c appliance.QueueConfig, owner string) error {
	if dl := s.ownerOf(c.DeadLetter); dl != "" && dl != owner {
		return fmt.Errorf("%w: queue %s is served by node %s and its dead-letter queue %s by node %s: a queue and its dead-letter queue share a node",
			appliance.ErrConflict, c.Name, owner, c.DeadLetter, dl)
	}
	return nil
}

// declareDeadLetter declares c's dead-letter queue on owner when it is
// not declared yet.
func (s *State) declareDeadLetter(c appliance.QueueConfig, owner string) {
	name := c.DeadLetter
	if name == "" || name == c.Name {
		return
	}
	if _, ok := s.Queues[name]; ok {
		return
	}
	dc := appliance.QueueConfig{Name: name, Durability: c.Durability}.WithDefaults()
	replicas := s.replicas()
	p := defaultPolicy(dc.Durability, replicas)
	var warnings []string
	if dc.Durability == appliance.Buffered {
		warnings = append(warnings, appliance.BufferedWarning)
	}
	s.Queues[name] = Queue{Config: dc, Policy: p, Warnings: warnings, DefaultPolicy: true, Incarnation: s.Applied}
	s.Assignments[name] = s.place(name, dc.Partitions, replicas, p, owner)
	for i := range s.Assignments[name] {
		s.Assignments[name][i].Incarnation = s.Applied
	}
}

// defaultPolicy is the policy of a queue declared without one: a majority
// of its copies, written for a buffered queue, durable for a durable one.
func defaultPolicy(mode appliance.Durability, replicas int) Policy {
	if mode == appliance.Durable {
		return Policy{Kind: MajorityDurable}
	}
	return Policy{Kind: ReplicaBuffered, N: replicas/2 + 1}
}

func (s *State) deleteQueue(name string) error {
	if _, ok := s.Queues[name]; !ok {
		return fmt.Errorf("%w: %s", ErrUnknownQueue, name)
	}
	delete(s.Queues, name)
	delete(s.Assignments, name)
	return nil
}

// Follows reports whether the state makes member a follower of the copy
// of queue's partition under incarnation.
func (s *State) Follows(member, queue string, incarnation uint64, partition int) bool {
	as := s.Assignments[queue]
	if partition < 0 || partition >= len(as) {
		return false
	}
	a := as[partition]
	return a.Incarnation == incarnation && slices.Contains(a.Followers, member)
}

// Holds reports whether the state gives member a copy (owned or
// followed) of queue's partition under incarnation.
func (s *State) Holds(member, queue string, incarnation uint64, partition int) bool {
	as := s.Assignments[queue]
	if partition < 0 || partition >= len(as) {
		return false
	}
	a := as[partition]
	return a.Incarnation == incarnation && slices.Contains(a.Copies(), member)
}
