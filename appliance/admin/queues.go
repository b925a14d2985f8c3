package admin

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/fibril-edge/fibril/appliance"
)

// queueView is a queue as the API shows it. Every position names its
// boundary: written (handed to the operating system) or durable (synced).
type queueView struct {
	Name        string          `json:"name"`
	Durability  string          `json:"durability"`
	Warning     string          `json:"warning,omitempty"` // the loss window of a buffered queue
	Unavailable string          `json:"unavailable,omitempty"`
	Messages    int64           `json:"messages"` // unsettled: ready plus in flight
	Bytes       int64           `json:"bytes"`
	Ready       int64           `json:"ready"`
	InFlight    int64           `json:"in_flight"`
	Consumers   int             `json:"consumers"`
	Counters    countersView    `json:"counters"`
	DeadLetter  string          `json:"dead_letter"`
	MaxDeliv    int             `json:"max_deliveries"`
	AckDeadline int64           `json:"ack_deadline_ms"`
	Dedupe      int64           `json:"dedupe_window_ms"`
	DedupeTable dedupeView      `json:"dedupe"`
	Limits      limitsView      `json:"limits"`
	ModeChange  modeChangeView  `json:"mode_change"`
	Partitions  []partitionView `json:"partitions"`
}

// modeChangeView is the queue's mode change in progress and the last one
// that failed; "durability" is the mode in effect (the one desired once no
// change is pending), each partition's "mode" the one it applies.
type modeChangeView struct {
	Pending   bool       `json:"pending"`
	To        string     `json:"to,omitempty"`    // while pending
	Since     *time.Time `json:"since,omitempty"` // while pending
	LastError string     `json:"last_error,omitempty"`
	FailedAt  *time.Time `json:"failed_at,omitempty"`
	Changed   *time.Time `json:"changed,omitempty"` // last change in effect, since fibrild started
}

func viewModeChange(m appliance.ModeChange) modeChangeView {
	at := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	v := modeChangeView{Pending: m.Pending, LastError: m.LastError, FailedAt: at(m.FailedAt), Changed: at(m.Changed)}
	if m.Pending {
		v.To, v.Since = m.To.String(), at(m.Since)
	}
	return v
}

type limitsView struct {
	MaxBytes    int64  `json:"max_bytes"`    // 0: unlimited
	MaxMessages int64  `json:"max_messages"` // 0: unlimited
	Overflow    string `json:"overflow"`     // reject | drop-oldest
}

// dedupeView is the queue's dedupe table: what it holds in all
// partitions, and the bounds each partition keeps it within.
type dedupeView struct {
	Entries    int64 `json:"entries"`
	Bytes      int64 `json:"bytes"`   // ids plus appliance.DedupeEntryCost each
	Evicted    int64 `json:"evicted"` // forgotten early by a bound since fibrild started
	MaxEntries int64 `json:"max_entries"`
	MaxBytes   int64 `json:"max_bytes"`
}

type countersView struct {
	Published       int64 `json:"published"`
	Duplicates      int64 `json:"duplicates"`
	Expired         int64 `json:"expired"`
	Discarded       int64 `json:"discarded"`
	DeadLettered    int64 `json:"dead_lettered"`
	RejectedFull    int64 `json:"rejected_full"`
	RejectedDisk    int64 `json:"rejected_disk"`
	DroppedOverflow int64 `json:"dropped_overflow"`
	LostQuarantined int64 `json:"lost_quarantined"`
	Delivered       int64 `json:"delivered"`
	Redelivered     int64 `json:"redelivered"`
	Acked           int64 `json:"acked"`
	Requeued        int64 `json:"requeued"`
	Rejected        int64 `json:"rejected"`
	Purged          int64 `json:"purged"`
}

type partitionView struct {
	Index            int               `json:"index"`
	Mode             string            `json:"mode"`         // the mode its appends complete under: durable or buffered
	WrittenNext      uint64            `json:"written_next"` // offset after the last record handed to the OS
	DurableNext      uint64            `json:"durable_next"` // offset after the last synced record
	UnsyncedRecords  uint64            `json:"unsynced_records"`
	UnsyncedBytes    int64             `json:"unsynced_bytes"`
	OldestUnsyncedMs int64             `json:"oldest_unsynced_ms"` // 0 when nothing is unsynced
	LastSync         *time.Time        `json:"last_sync"`          // null before the first sync
	SyncPending      bool              `json:"sync_pending"`
	Latched          bool              `json:"latched"`
	LastError        string            `json:"last_error"`
	Head             uint64            `json:"head"`
	Segments         int               `json:"segments"`
	Messages         int64             `json:"messages"`
	Ready            int64             `json:"ready"`
	InFlight         int64             `json:"in_flight"`
	Quarantined      []quarantinedView `json:"quarantined"`
	LostRecords      uint64            `json:"lost_records"` // log records lost to damage
}

type quarantinedView struct {
	FromOffset   uint64 `json:"from_offset"`
	ToOffset     uint64 `json:"to_offset"` // exclusive
	File         string `json:"file"`
	LostMessages int64  `json:"lost_messages"`
}

func viewQueue(in appliance.QueueInfo) queueView {
	c, k := in.Config, in.Counters
	v := queueView{
		Name: c.Name, Durability: c.Durability.String(), Warning: in.Warning, Unavailable: in.Unavailable,
		Messages: in.Messages, Bytes: in.Bytes, Ready: in.Ready, InFlight: in.InFlight, Consumers: in.Consumers,
		Counters: countersView{
			Published: k.Published, Duplicates: k.Duplicates, Expired: k.Expired, Discarded: k.Discarded,
			DeadLettered: k.DeadLettered, RejectedFull: k.RejectedFull, RejectedDisk: k.RejectedDisk,
			DroppedOverflow: k.DroppedOverflow, LostQuarantined: k.LostQuarantined,
			Delivered: k.Delivered, Redelivered: k.Redelivered, Acked: k.Acked, Requeued: k.Requeued,
			Rejected: k.Rejected, Purged: k.Purged,
		},
		DeadLetter: c.DeadLetter, MaxDeliv: c.MaxDeliveries,
		AckDeadline: c.AckDeadline.Milliseconds(), Dedupe: c.DedupeWindow.Milliseconds(),
		Limits:     limitsView{MaxBytes: c.MaxBytes, MaxMessages: c.MaxMessages, Overflow: c.Overflow.String()},
		ModeChange: viewModeChange(in.ModeChange),
		Partitions: make([]partitionView, 0, len(in.Partitions)),
	}
	v.DedupeTable = dedupeView{Entries: in.Dedupe.Entries, Bytes: in.Dedupe.Bytes, Evicted: in.Dedupe.Evicted}
	v.DedupeTable.MaxEntries, v.DedupeTable.MaxBytes = c.DedupeBounds()
	for _, p := range in.Partitions {
		pv := partitionView{
			Index: p.Index, Mode: p.Mode.String(), WrittenNext: p.WrittenNext, DurableNext: p.DurableNext,
			UnsyncedRecords: p.UnsyncedRecords, UnsyncedBytes: p.UnsyncedBytes,
			OldestUnsyncedMs: p.OldestUnsynced.Milliseconds(), SyncPending: p.SyncPending,
			Latched: p.Latched, LastError: p.LastError, Head: p.Head, Segments: p.Segments,
			Messages: p.Messages, Ready: p.Ready, InFlight: p.InFlight, LostRecords: p.LostRecords,
			Quarantined: make([]quarantinedView, 0, len(p.Quarantined)),
		}
		if !p.LastSync.IsZero() {
			t := p.LastSync.UTC()
			pv.LastSync = &t
		}
		for _, q := range p.Quarantined {
			pv.Quarantined = append(pv.Quarantined, quarantinedView{
				FromOffset: q.FromOffset, ToOffset: q.ToOffset, File: q.File, LostMessages: q.LostMessages})
		}
		v.Partitions = append(v.Partitions, pv)
	}
	return v
}

// queueList is GET /api/queues: the open queues and those that failed to
// open at start-up.
type queueList struct {
	Queues []queueView  `json:"queues"`
	Failed []failedView `json:"failed"`
}

type failedView struct {
	Name  string `json:"name"`
	Error string `json:"error"`
}

func (s *Server) listQueues(r *http.Request) (int, any, error) {
	out := queueList{Queues: []queueView{}, Failed: []failedView{}}
	for _, name := range s.b.QueueNames() {
		in, err := s.b.QueueInfo(name)
		if err != nil {
			continue // deleted since the listing
		}
		out.Queues = append(out.Queues, viewQueue(in))
	}
	for name, err := range s.b.QueueErrors() {
		out.Failed = append(out.Failed, failedView{Name: name, Error: err.Error()})
	}
	return 0, out, nil
}

// declareRequest is POST /api/queues. Omitted fields take their defaults
// on a new queue and keep the stored value on an existing one.
type declareRequest struct {
	Name          string `json:"name"`
	Durability    string `json:"durability"` // durable | buffered | "" (keep, or durable)
	Partitions    int    `json:"partitions"`
	DeadLetter    string `json:"dead_letter"`
	MaxDeliveries int    `json:"max_deliveries"`
	AckDeadlineMs int64  `json:"ack_deadline_ms"`
	MaxBytes      int64  `json:"max_bytes"`
	MaxMessages   int64  `json:"max_messages"`
	Overflow      string `json:"overflow"` // reject | drop-oldest
	DedupeMs      int64  `json:"dedupe_window_ms"`
	DedupeMaxEnt  int64  `json:"dedupe_max_entries"` // for the whole queue
	DedupeMaxByte int64  `json:"dedupe_max_bytes"`   // for the whole queue
	Policy        string `json:"policy"`             // cluster nodes: replica_durable:N, majority_durable, replica_buffered:N
}

func (d declareRequest) config() (appliance.QueueConfig, error) {
	mode, err := appliance.ParseDurability(d.Durability)
	if err != nil {
		return appliance.QueueConfig{}, err
	}
	c := appliance.QueueConfig{
		Name: d.Name, Durability: mode, Partitions: d.Partitions, DeadLetter: d.DeadLetter,
		MaxDeliveries: d.MaxDeliveries, AckDeadline: time.Duration(d.AckDeadlineMs) * time.Millisecond,
		MaxBytes: d.MaxBytes, MaxMessages: d.MaxMessages, DedupeWindow: time.Duration(d.DedupeMs) * time.Millisecond,
		DedupeMaxEntries: d.DedupeMaxEnt, DedupeMaxBytes: d.DedupeMaxByte,
	}
	if d.Overflow != "" {
		if c.Overflow, err = appliance.ParseOverflow(d.Overflow); err != nil {
			return appliance.QueueConfig{}, err
		}
	}
	return c, nil
}

// declareReply is POST /api/queues: 201 when created, 200 when the queue
// existed; the view carries the mode in effect and its warning.
type declareReply struct {
	Created bool      `json:"created"`
	Queue   queueView `json:"queue"`
}

func (s *Server) declareQueue(r *http.Request) (int, any, error) {
	var req declareRequest
	if err := decode(r, maxRequest, &req); err != nil {
		return 0, nil, err
	}
	cfg, err := req.config()
	if err != nil {
		return 0, nil, err
	}
	if s.opts.ClusterOps != nil {
		return s.declareInCluster(r, cfg, req.Policy)
	}
	if req.Policy != "" {
		return 0, nil, invalid("policy %q: replication policies apply to cluster nodes only", req.Policy)
	}
	res, err := s.b.Declare(r.Context(), cfg)
	if err != nil {
		return 0, nil, err
	}
	in, err := s.b.QueueInfo(res.Config.Name)
	if err != nil {
		return 0, nil, err
	}
	status := http.StatusOK
	if res.Created {
		status = http.StatusCreated
	}
	return status, declareReply{Created: res.Created, Queue: viewQueue(in)}, nil
}

func (s *Server) getQueue(r *http.Request) (int, any, error) {
	name, err := queueName(r)
	if err != nil {
		return 0, nil, err
	}
	in, err := s.b.QueueInfo(name)
	if err != nil {
		return 0, nil, err
	}
	v := viewQueue(in)
	if modes, ok := s.opts.ClusterOps.(ClusterModes); ok {
		if m, inEffect := modes.PendingMode(name); m != nil {
			v.ModeChange = clusterModeView(m, v.ModeChange)
			v.Durability = inEffect // the broker may lead it (a change to durable waiting for copies)
		}
	}
	return 0, v, nil
}

// deleteQueue answers DELETE /api/queues/{name}. On a cluster node the
// deletion goes through the control plane, whichever node serves the
// queue; on a solo node the broker deletes it.
func (s *Server) deleteQueue(r *http.Request) (int, any, error) {
	name, err := queueName(r)
	if err != nil {
		return 0, nil, err
	}
	del := s.b.DeleteQueue
	if s.opts.ClusterOps != nil {
		del = s.opts.ClusterOps.DeleteQueue
	}
	if err := del(r.Context(), name); err != nil {
		return 0, nil, err
	}
	return 0, map[string]string{"deleted": name}, nil
}

type modeRequest struct {
	Durability string `json:"durability"`
}

// setMode answers POST /api/queues/{name}/mode {"durability": ...}: the
// queue's mode changes, fenced (appliance.Broker.SetMode), and the answer
// is the queue once the change is in effect; 409 while another change of
// the queue is pending.
func (s *Server) setMode(r *http.Request) (int, any, error) {
	name, err := queueName(r)
	if err != nil {
		return 0, nil, err
	}
	var req modeRequest
	if err := decode(r, maxRequest, &req); err != nil {
		return 0, nil, err
	}
	d, err := appliance.ParseDurability(req.Durability)
	if err != nil || req.Durability == "" {
		return 0, nil, invalid("durability %q: want durable or buffered", req.Durability)
	}
	if modes, ok := s.opts.ClusterOps.(ClusterModes); ok {
		return s.setClusterMode(r, modes, name, d)
	}
	if _, _, err := s.b.SetMode(r.Context(), name, d); err != nil {
		return 0, nil, err
	}
	in, err := s.b.QueueInfo(name)
	if err != nil {
		return 0, nil, err
	}
	return 0, viewQueue(in), nil
}

// setClusterMode is setMode on a cluster node: the change is asked for
// cluster-wide and carried out by the queue's owner. 200 with the queue
// once it is in effect; 202 with the pending change while it waits (for
// the copies to be durable, or for a follower that is down).
func (s *Server) setClusterMode(r *http.Request, modes ClusterModes, name string, d appliance.Durability) (int, any, error) {
	decl, err := modes.SetMode(r.Context(), name, d)
	if err != nil {
		return 0, nil, err
	}
	status := http.StatusOK
	if decl.ModeChange != nil {
		status = http.StatusAccepted
	}
	if in, err := s.b.QueueInfo(name); err == nil { // served here
		v := viewQueue(in)
		v.Durability = decl.Durability
		v.ModeChange = clusterModeView(decl.ModeChange, v.ModeChange)
		return status, v, nil
	}
	owner, addr, _ := s.opts.ClusterOps.Owner(name)
	return status, map[string]any{"name": decl.Name, "durability": decl.Durability, "partitions": decl.Partitions,
		"policy": decl.Policy, "warnings": decl.Warnings, "served_by": owner, "served_at": addr,
		"mode_change": clusterModeView(decl.ModeChange, modeChangeView{})}, nil
}

// clusterModeView is a queue's mode change view with the cluster's
// pending change (nil: none) in place of the broker's.
func clusterModeView(m *ClusterModeChange, local modeChangeView) modeChangeView {
	if m == nil {
		local.Pending, local.To, local.Since = false, "", nil
		return local
	}
	since := m.Since
	local.Pending, local.To, local.Since = true, m.To, &since
	return local
}

// purgeQueue answers POST /api/queues/{name}/purge: the queue's ready
// messages are discarded, its delivered ones stay with their consumers.
// On a cluster node the node serving the queue purges it; another node
// answers 409 served_elsewhere, naming it.
func (s *Server) purgeQueue(r *http.Request) (int, any, error) {
	name, err := queueName(r)
	if err != nil {
		return 0, nil, err
	}
	n, err := s.b.Purge(r.Context(), name)
	if errors.Is(err, appliance.ErrNotFound) && s.opts.ClusterOps != nil {
		if owner, addr, ok := s.opts.ClusterOps.Owner(name); ok {
			return 0, nil, &Error{Status: http.StatusConflict, Code: "served_elsewhere",
				Err:     fmt.Errorf("queue %s is served by node %s: purge it through that node's admin API", name, owner),
				Details: map[string]string{"served_by": owner, "served_at": addr}}
		}
	}
	if err != nil {
		return 0, nil, err
	}
	return 0, map[string]any{"queue": name, "purged": n}, nil
}

// queueName is the {name} of the path, checked.
func queueName(r *http.Request) (string, error) {
	name := r.PathValue("name")
	return name, appliance.ValidateName(name)
}
