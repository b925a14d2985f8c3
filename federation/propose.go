package federation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/hashicorp/raft"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/federation/control"
)

// A control request travels on its own connection to the cluster port:
// the dialer writes one JSON request, the node answers one JSON response
// and closes. A follower forwards proposals to the leader this way, and a
// joining node announces itself.
type controlRequest struct {
	Join    *control.Member  `json:"join,omitempty"`
	Command *control.Command `json:"command,omitempty"`
	// Ping asks only for an answer: the leader's failure detector.
	Ping bool `json:"ping,omitempty"`
	// Live, from a node whose raft state was empty at open (its ID),
	// asks the leader where that node's live commands begin (Node.Fresh):
	// the answer is the leader's applied index, after a barrier, and
	// whether the node is a member already.
	Live string `json:"live,omitempty"`
	// Hops counts the nodes that passed the request on: a node that
	// receives one passed on maxHops times answers only if it leads (see
	// servingKey).
	Hops int `json:"hops,omitempty"`
}

// maxHops bounds how often a request is passed on: from the node asked
// to a leader it knows of, which may have stepped down and pass it to the
// new one, and once more through an election.
const maxHops = 3

// servingKey marks the context of a request served for another node; its
// value is the request's Hops. A request passed on from there counts one
// hop more, and one that has made maxHops is not passed on:
// two followers that each take the other for the leader (stale, for an
// election) would otherwise pass one request back and forth, each hop on
// a new connection with a new timeout, until their descriptors ran out.
type servingKey struct{}

// mayForward reports whether a request in ctx may be passed on.
func mayForward(ctx context.Context) bool {
	hops, _ := ctx.Value(servingKey{}).(int)
	return hops < maxHops
}

type controlResponse struct {
	Code    string        `json:"code,omitempty"` // sentinel name, "" = ok
	Error   string        `json:"error,omitempty"`
	Queue   control.Queue `json:"queue,omitzero"`
	Created bool          `json:"created,omitempty"`
	Index   uint64        `json:"index,omitempty"`  // the command's raft index; for Live: the leader's applied index
	Member  bool          `json:"member,omitempty"` // for Live: the asker is a member
}

// sentinels cross the wire by name so a forwarded error still matches
// errors.Is on the node that asked.
var sentinels = map[string]error{
	"mode_conflict":      appliance.ErrModeConflict,
	"conflict":           appliance.ErrConflict,
	"invalid":            appliance.ErrInvalid,
	"invalid_policy":     control.ErrInvalidPolicy,
	"not_enough_members": control.ErrNotEnoughMembers,
	"unknown_queue":      control.ErrUnknownQueue,
	"unknown_setting":    control.ErrUnknownSetting,
	"no_leader":          ErrNoLeader,
}

// The request's whole exchange must fit in this.
const controlTimeout = 30 * time.Second

type remoteError struct {
	sentinel error
	msg      string
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

func encodeResult(r control.Result) controlResponse {
	resp := controlResponse{Queue: r.Queue, Created: r.Created, Index: r.Index}
	if r.Err != nil {
		resp.Error, resp.Code = r.Err.Error(), "error"
		// The most specific sentinel wins (a mode conflict is also a conflict).
		for _, name := range []string{"mode_conflict", "conflict", "invalid_policy", "not_enough_members",
			"unknown_queue", "unknown_setting", "invalid", "no_leader"} {
			if errors.Is(r.Err, sentinels[name]) {
				resp.Code = name
				break
			}
		}
	}
	return resp
}

func decodeResult(resp controlResponse) control.Result {
	r := control.Result{Queue: resp.Queue, Created: resp.Created, Index: resp.Index}
	if resp.Code != "" {
		r.Err = &remoteError{sentinel: sentinels[resp.Code], msg: resp.Error}
	}
	return r
}

// maxControlRequest bounds a control request: a few declarations' worth,
// read before anything is allocated for more.
const maxControlRequest = 1 << 20

// isMember reports whether id is in the member list.
func (n *Node) isMember(id string) bool {
	ok := false
	n.read(func(s *control.State) { _, ok = s.Members[id] })
	return ok
}

// readControlRequest decodes one control request, reading at most
// maxControlRequest bytes.
func readControlRequest(r io.Reader) (controlRequest, error) {
	var req controlRequest
	if err := json.NewDecoder(io.LimitReader(r, maxControlRequest)).Decode(&req); err != nil {
		return controlRequest{}, fmt.Errorf("%w: control request: %w", appliance.ErrInvalid, err)
	}
	return req, nil
}

// refuseControl checks a request against the node its peer's certificate
// names: a peer may ask to join only as itself, unless it is a member
// passing a joiner's request on, and a node brings only its own queues
// along.
func refuseControl(req controlRequest, peer string, isMember func(string) bool) error {
	if req.Join != nil && req.Join.ID != peer && !isMember(peer) {
		return fmt.Errorf("%w: the certificate names node %q, which may not join as %q", appliance.ErrInvalid, peer, req.Join.ID)
	}
	if cmd := req.Command; cmd != nil {
		switch {
		case cmd.Op == control.OpAdopt && cmd.Owner != peer:
			return fmt.Errorf("%w: the certificate names node %q, which may not bring queues along for %q", appliance.ErrInvalid, peer, cmd.Owner)
		case cmd.Op == control.OpAddMember || cmd.Op == control.OpRemoveMember:
			// Members change only through a Join, checked above.
			return fmt.Errorf("%w: %s is not taken from a peer (node %q)", appliance.ErrInvalid, cmd.Op, peer)
		case cmd.Op == control.OpSeal && (cmd.Seal == nil || cmd.Seal.Node != peer):
			return fmt.Errorf("%w: the certificate names node %q, which may not report seals for another node", appliance.ErrInvalid, peer)
		}
	}
	return nil
}

// serveControl answers one control request; only the leader applies.
func (n *Node) serveControl(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(controlTimeout))
	req, err := readControlRequest(c)
	if err != nil {
		return
	}
	if id, ok := PeerNodeID(c); ok {
		if err := refuseControl(req, id, n.isMember); err != nil {
			json.NewEncoder(c).Encode(encodeResult(control.Result{Err: err}))
			return
		}
	}
	if req.Ping {
		json.NewEncoder(c).Encode(controlResponse{})
		return
	}
	select {
	case <-n.ready:
	default: // raft is still starting
		json.NewEncoder(c).Encode(encodeResult(control.Result{Err: ErrNoLeader}))
		return
	}
	hops := req.Hops
	if req.Command != nil && (req.Command.Op == control.OpAdopt || req.Command.Op == control.OpSeal) {
		// Bound to the node that sent it (refuseControl): the leader
		// checks it against its sender's certificate, so it is not
		// passed on; a node that does not lead answers ErrNoLeader and
		// the sender asks the leader itself.
		hops = maxHops
	}
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), servingKey{}, hops), controlTimeout-time.Second)
	defer cancel()
	if req.Live != "" {
		idx, member, err := n.askLive(ctx, req.Live) // answered here when leading, else forwarded
		if err != nil {
			json.NewEncoder(c).Encode(encodeResult(control.Result{Err: err}))
			return
		}
		json.NewEncoder(c).Encode(controlResponse{Index: idx, Member: member})
		return
	}
	var r control.Result
	switch {
	case req.Join != nil:
		r.Err = n.join(ctx, *req.Join)
	case req.Command != nil:
		r = n.propose(ctx, *req.Command)
	default:
		r.Err = fmt.Errorf("%w: empty control request", appliance.ErrInvalid)
	}
	json.NewEncoder(c).Encode(encodeResult(r))
}

// propose applies cmd through the leader: here when this node leads,
// else forwarded. It waits out an election up to ctx's end, unless it
// serves a request that made its hops: then the node that asked retries.
func (n *Node) propose(ctx context.Context, cmd control.Command) control.Result {
	for {
		r, err := n.proposeOnce(ctx, cmd)
		if err == nil {
			return r
		}
		if !errors.Is(err, ErrNoLeader) && !errors.Is(err, raft.ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost) {
			return control.Result{Err: err}
		}
		if !mayForward(ctx) {
			return control.Result{Err: fmt.Errorf("%w: %w", ErrNoLeader, err)}
		}
		select {
		case <-ctx.Done():
			return control.Result{Err: fmt.Errorf("%w: %w", ErrNoLeader, ctx.Err())}
		case <-n.stop:
			return control.Result{Err: ErrClosed}
		case <-time.After(n.opts.ElectionTimeout / 10):
		}
	}
}

// proposeSeen is propose for a caller that reads this node's state next
// (read your writes): it also waits, within ctx, until this node has
// applied the command, whose outcome the leader answered with.
func (n *Node) proposeSeen(ctx context.Context, cmd control.Command) control.Result {
	r := n.propose(ctx, cmd)
	if r.Index == 0 { // not applied anywhere: nothing to wait for
		return r
	}
	if err := n.waitFor(ctx, func(s *control.State) bool { return s.Applied >= r.Index }); err != nil && r.Err == nil {
		r.Err = err
	}
	return r
}

// proposeOnce returns an error only for failures worth retrying at the
// next leader; the command's own outcome is in the Result.
func (n *Node) proposeOnce(ctx context.Context, cmd control.Command) (control.Result, error) {
	if n.raft.State() == raft.Leader {
		b, err := json.Marshal(cmd)
		if err != nil {
			return control.Result{}, err
		}
		timeout := time.Until(deadline(ctx))
		f := n.raft.Apply(b, timeout)
		if err := n.awaitRaft(context.Background(), f); err != nil { // the command may apply after ctx ends
			return control.Result{}, err
		}
		return f.Response().(control.Result), nil
	}
	addrs := n.leaderward(ctx, "") // the leader only: a proposal is not fanned out
	if len(addrs) == 0 {
		return control.Result{}, ErrNoLeader
	}
	addr := addrs[0]
	resp, err := n.request(ctx, addr, controlRequest{Command: &cmd})
	if err != nil {
		return control.Result{}, fmt.Errorf("%w: forward to %s: %w", ErrNoLeader, addr, err)
	}
	r := decodeResult(resp)
	if errors.Is(r.Err, ErrNoLeader) {
		return control.Result{}, r.Err
	}
	return r, nil
}

// leaderward lists where a follower sends a request that only the leader
// answers, made for node id: nowhere when the request made its hops
// (mayForward), else the leader it knows of, then, when id is this node
// itself, each configured peer (a joiner that is not in raft's
// configuration yet hears of no leader, and a peer forwards to its own).
// A request served for another node goes only to a known leader, not
// fanned out.
func (n *Node) leaderward(ctx context.Context, id string) []string {
	if !mayForward(ctx) {
		return nil
	}
	var addrs []string
	if _, a := n.Leader(); a != "" && a != n.ClusterAddr() {
		addrs = append(addrs, a)
	}
	if id == n.opts.ID {
		for _, p := range n.opts.Peers {
			if p.Addr != n.ClusterAddr() {
				addrs = append(addrs, p.Addr)
			}
		}
	}
	return addrs
}

// requestLeaderward sends req, made for node id, to each address
// leaderward lists until one answers without an error, and returns that
// answer, else the last error.
func (n *Node) requestLeaderward(ctx context.Context, id string, req controlRequest) (controlResponse, error) {
	err := ErrNoLeader
	for _, a := range n.leaderward(ctx, id) {
		resp, rerr := n.request(ctx, a, req)
		if rerr != nil {
			err = rerr
			continue
		}
		if r := decodeResult(resp); r.Err != nil {
			err = r.Err
			continue
		}
		return resp, nil
	}
	return controlResponse{}, err
}

// request sends one control request to addr and reads the answer.
func (n *Node) request(ctx context.Context, addr string, req controlRequest) (controlResponse, error) {
	c, err := n.mux.dial(addr, protoControl, time.Until(deadline(ctx)))
	if err != nil {
		return controlResponse{}, err
	}
	defer c.Close()
	c.SetDeadline(deadline(ctx))
	if hops, serving := ctx.Value(servingKey{}).(int); serving {
		req.Hops = hops + 1 // passed on for another node
	}
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return controlResponse{}, err
	}
	var resp controlResponse
	if err := json.NewDecoder(c).Decode(&resp); err != nil {
		return controlResponse{}, err
	}
	return resp, nil
}

// ping asks the node at addr for a sign of life, on a link kept for
// pings (links.ping, Node.probes): the leader's failure detector pings
// every member a few times a timeout, and on a box short of CPU a
// handshake per ping is what would miss its deadline first. The control
// request's Ping is still answered, for a leader of an older version.
func (n *Node) ping(ctx context.Context, addr string) error { return n.probes.ping(ctx, addr) }

func deadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(controlTimeout)
}

// join puts m into raft's configuration (voter or not) and the member
// list. On a follower it is forwarded to the leader, or, for this node's
// own announcement, also to each configured peer (see leaderward).
func (n *Node) join(ctx context.Context, m control.Member) error {
	if n.raft.State() != raft.Leader {
		_, err := n.requestLeaderward(ctx, m.ID, controlRequest{Join: &m})
		return err
	}
	if err := n.addToRaft(m); err != nil {
		return err
	}
	var known bool
	n.read(func(s *control.State) { cur, ok := s.Members[m.ID]; known = ok && cur == m })
	if known {
		return nil
	}
	return n.propose(ctx, control.Command{Op: control.OpAddMember, Member: &m}).Err
}

// addToRaft adds m to raft's configuration unless it is there already.
func (n *Node) addToRaft(m control.Member) error {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == raft.ServerID(m.ID) && s.Address == raft.ServerAddress(m.ClusterAddr) {
			return nil
		}
	}
	var fut raft.IndexFuture
	if m.Voter {
		fut = n.raft.AddVoter(raft.ServerID(m.ID), raft.ServerAddress(m.ClusterAddr), 0, 0)
	} else {
		fut = n.raft.AddNonvoter(raft.ServerID(m.ID), raft.ServerAddress(m.ClusterAddr), 0, 0)
	}
	if err := fut.Error(); err != nil {
		return fmt.Errorf("federation: add %s to raft: %w", m.ID, err)
	}
	n.log.Info("cluster member added", "member", m.ID, "addr", m.ClusterAddr, "voter", m.Voter)
	return nil
}

// Declare declares a queue cluster-wide under policy ("" = the default
// for its mode). It returns the declaration in effect.
func (n *Node) Declare(ctx context.Context, c appliance.QueueConfig, policy string) (control.Queue, bool, error) {
	p, warning, err := control.ParsePolicy(policy)
	if err != nil {
		return control.Queue{}, false, err
	}
	n.awaitMembers(ctx)
	cmd := control.Command{Op: control.OpDeclare, Queue: &c, Policy: p}
	if warning != "" {
		n.log.Warn(warning, "queue", c.Name)
		cmd.Warnings = []string{warning}
	}
	r := n.proposeSeen(ctx, cmd)
	return r.Queue, r.Created, r.Err
}

// membersWait bounds how long a declare waits for the members a new
// cluster starts with.
const membersWait = 10 * time.Second

// awaitMembers waits, up to membersWait, until this node and the peers it
// was started with are members of the state: a declare right after the
// cluster started would otherwise be placed on fewer nodes, or refused as
// "not enough members", while the members' announcements are on their way.
func (n *Node) awaitMembers(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, membersWait)
	defer cancel()
	_ = n.waitFor(ctx, func(s *control.State) bool {
		if _, ok := s.Members[n.opts.ID]; !ok {
			return false
		}
		for _, p := range n.opts.Peers {
			if _, ok := s.Members[p.ID]; !ok {
				return false
			}
		}
		return true
	})
}

// waitFor waits until this node's view of the state satisfies cond.
func (n *Node) waitFor(ctx context.Context, cond func(*control.State) bool) error {
	for {
		changed := n.Changed()
		var ok bool
		n.read(func(s *control.State) { ok = cond(s) })
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("federation: waiting for this node to apply the change: %w", ctx.Err())
		case <-n.stop:
			return ErrClosed
		}
	}
}

// DeleteQueue removes a queue's declaration and assignments: whichever
// declaration the name names when the delete applies.
func (n *Node) DeleteQueue(ctx context.Context, name string) error {
	return n.proposeSeen(ctx, control.Command{Op: control.OpDeleteQueue, ID: name}).Err
}

// SetSettings changes cluster settings.
func (n *Node) SetSettings(ctx context.Context, kv map[string]string) error {
	return n.proposeSeen(ctx, control.Command{Op: control.OpSetSettings, Settings: kv}).Err
}

// Join asks the cluster reachable at peer (a cluster address) to admit m.
func (n *Node) JoinVia(ctx context.Context, peer string) error {
	resp, err := n.request(ctx, peer, controlRequest{Join: ptr(n.Member())})
	if err != nil {
		return fmt.Errorf("federation: join via %s: %w", peer, err)
	}
	return decodeResult(resp).Err
}

func ptr[T any](v T) *T { return &v }
