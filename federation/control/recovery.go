package control

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/fibril-edge/fibril/appliance"
)

// Failover of a queue through the control log (docs/decisions.md, "Failover
// and written-set recovery"). A queue's partitions share an owner, so a
// queue recovers as one:
//
//  1. OpRecover, proposed by the leader when the owner has not answered
//     for the failover timeout (or by a restarted owner, which never
//     resumes writing at its old end), moves every partition of the queue
//     from epoch e to e+1 and marks it sealing. From then on the control
//     state lets no stream of epoch e in, and no owner serves the queue.
//  2. Every live copy (the old owner's too) seals at e+1: it fences the
//     old epoch, syncs what it has written, and reports its durable end
//     and the epoch of its last record with OpSeal, one report per node
//     covering the queue's partitions. A copy that may lack records it
//     once held (created empty after the queue had records, not yet
//     caught up) reports as no witness.
//  3. Once E-W+1 witnesses of every partition have sealed (E the copies,
//     W the policy's count), every written set of epoch e meets the
//     sealed set, so every confirmed record is on a sealed witness. For
//     a buffered queue only live witnesses count (Seal.Cut): a copy
//     whose process restarted may have lost what it had written and not
//     synced. With too few live ones (every copy lost power at once) the
//     recovery waits for every copy (Assignment.Installable). The
//     witness with the best history in every partition (epoch of the last
//     record, then end) becomes the owner at e+1; the other copies follow
//     it and cut back to where they diverge from it. When no witness is
//     best in every partition, the one best in the most is chosen and
//     takes each other partition's better tail from the witness holding
//     it (TailFrom, TailTo: a stream at e+1 from that copy), then seals
//     again, and is installed once it is best everywhere.
//
// W is never lowered to get there: with too few live witnesses the queue
// stays sealing, and its status says how many it has and needs.

// Seal is one node's report for a partition it holds a copy of.
type Seal struct {
	Node string `json:"node"`
	// End is the copy's durable end after the seal's sync: one past its
	// last record.
	End uint64 `json:"end"`
	// LastEpoch is the epoch its last record was written in.
	LastEpoch uint64 `json:"last_epoch"`
	// Witness: the copy holds every record it ever acknowledged. A copy
	// created empty after the queue had records (a wiped data directory,
	// a new follower) is no witness until it has caught up.
	Witness bool `json:"witness"`
	// Cut: the copy may have lost records it acknowledged as written but
	// had not synced: the node's process opened it from disk (a restart,
	// a power cut) or reopened it after a storage failure, and no stream
	// has made it complete since. It holds every durable record it
	// acknowledged, so it is a witness for a durable queue; a buffered
	// queue confirms on written copies, and there it counts toward
	// E-W+1 only when it is not cut.
	Cut bool `json:"cut,omitempty"`
	// Acked, on a copy that is not cut, is the written end it had
	// acknowledged: End, or more when the seal reopened it after a
	// storage failure, which cut it back to its last sync. Such a copy
	// counts for a buffered queue while another sealed copy holds what it
	// lost.
	Acked uint64 `json:"acked,omitempty"`
	// NoCopy: the node holds no copy at all.
	NoCopy bool `json:"no_copy,omitempty"`
}

// counts reports whether the seal counts toward E-W+1 on a queue of
// mode, when the best sealed history ends at best: every record the copy
// acknowledged is on it or on that history.
func (sl Seal) counts(mode appliance.Durability, best uint64) bool {
	return sl.Witness && (Boundary(mode) == "durable" || !sl.Cut && sl.Acked <= best)
}

// Failover records a queue's latest recovery: who owned it, who owns it
// now, when it started and when the new owner was installed (unix
// nanoseconds, as the proposer's clock read them).
type Failover struct {
	Epoch       uint64 `json:"epoch"`
	From        string `json:"from"`
	To          string `json:"to,omitempty"`
	Reason      string `json:"reason"`
	StartedAt   int64  `json:"started_at"`
	InstalledAt int64  `json:"installed_at,omitempty"`
}

// Recover is OpRecover's argument: leave epoch Epoch of queue Queue.
type Recover struct {
	Queue string `json:"queue"`
	// Incarnation is the declaration of Queue meant; 0 (a command from
	// before incarnations were sent) means whichever the state has.
	Incarnation uint64 `json:"incarnation,omitempty"`
	Epoch       uint64 `json:"epoch"`
	Reason      string `json:"reason"`
	At          int64  `json:"at"`
}

// SealReport is OpSeal's argument: one node's seals of a queue's
// partitions at Epoch, in partition order.
type SealReport struct {
	Queue string `json:"queue"`
	// Incarnation is the declaration whose copies were sealed; 0 (a
	// report from before incarnations were sent) means whichever the
	// state has.
	Incarnation uint64 `json:"incarnation,omitempty"`
	Epoch       uint64 `json:"epoch"`
	Node        string `json:"node"`
	Seals       []Seal `json:"seals"`
	At          int64  `json:"at"`
}

// Copies is the partition's copies, owner first.
func (a Assignment) Copies() []string { return append([]string{a.Owner}, a.Followers...) }

// SealsNeeded is E-W+1: the witnesses that must seal before the epoch is
// installed.
func (a Assignment) SealsNeeded() int {
	e := a.Replicas()
	return max(e-a.Policy.Required(e)+1, 1)
}

// Witnesses counts the seals a partition of a queue of mode has that
// count toward E-W+1.
func (a Assignment) Witnesses(mode appliance.Durability) int {
	var best Seal
	for _, s := range a.Seals {
		if s.Witness && betterSeal(s, best) > 0 {
			best = s
		}
	}
	n := 0
	for _, s := range a.Seals {
		if s.counts(mode, best.End) {
			n++
		}
	}
	return n
}

// Installable reports whether the partition's seals let the recovery
// install an owner: E-W+1 of them count (every written set of the old
// epoch meets them), or every copy has sealed and one of them is a
// witness. The second happens when a buffered queue lost power on too
// many copies at once (a whole-site power cut): no copy is known to
// still hold what it had written, so the recovery waits for all of
// them; with every copy's durable end reported, waiting longer cannot
// bring back more, and the best witness's history (the longest
// surviving one) wins.
func (a Assignment) Installable(mode appliance.Durability) bool {
	if a.neverWritten() {
		return true
	}
	if a.Witnesses(mode) >= a.SealsNeeded() {
		return true
	}
	return len(a.Seals) >= a.Replicas() && slices.ContainsFunc(a.Seals, func(s Seal) bool { return s.Witness })
}

// recover starts a recovery of r.Queue at r.Epoch+1. It is a no-op when
// the queue is past r.Epoch already (another proposer was first), when
// it is sealing at r.Epoch+1, and when it was declared again since.
func (s *State) recover(r Recover) error {
	as, ok := s.Assignments[r.Queue]
	if !ok || len(as) == 0 {
		return fmt.Errorf("%w: %s", ErrUnknownQueue, r.Queue)
	}
	if as[0].Epoch != r.Epoch || (r.Incarnation != 0 && as[0].Incarnation != r.Incarnation) {
		return nil
	}
	as = s.ownAssignments(r.Queue)
	for i := range as {
		a := &as[i]
		a.Epoch++
		a.Sealing = true
		a.Seals = nil
	}
	q := s.Queues[r.Queue]
	q.LastFailover = &Failover{Epoch: as[0].Epoch, From: as[0].Owner, Reason: r.Reason, StartedAt: r.At}
	s.Queues[r.Queue] = q
	return nil
}

// seal records one node's seals, and installs the epoch once enough
// witnesses of every partition sealed. A report for another epoch or
// another declaration of the queue, from a node holding no copy, or
// repeated, changes nothing.
func (s *State) seal(r SealReport) error {
	as, ok := s.Assignments[r.Queue]
	if !ok || len(as) == 0 {
		return fmt.Errorf("%w: %s", ErrUnknownQueue, r.Queue)
	}
	if r.Incarnation != 0 && as[0].Incarnation != r.Incarnation {
		return nil
	}
	if len(r.Seals) != len(as) {
		return fmt.Errorf("%w: %d seals for %d partitions of %s", appliance.ErrInvalid, len(r.Seals), len(as), r.Queue)
	}
	if !as[0].Sealing || as[0].Epoch != r.Epoch || !slices.Contains(as[0].Copies(), r.Node) {
		return nil
	}
	as = s.ownAssignments(r.Queue)
	for i := range as {
		a := &as[i]
		sl := r.Seals[i]
		sl.Node = r.Node
		// A node seals again once it took a better tail (TailTo): its
		// report replaces the one before, never going back.
		if j := slices.IndexFunc(a.Seals, func(x Seal) bool { return x.Node == r.Node }); j >= 0 {
			// A seal synced what the copy had, so a later report that
			// is cut (the node restarted since) loses nothing of it.
			if old := a.Seals[j]; sl.Witness && (betterSeal(sl, old) > 0 || betterSeal(sl, old) == 0 && old.Cut && !sl.Cut) {
				a.Seals[j] = sl
			}
			continue
		}
		a.Seals = append(a.Seals, sl)
	}
	var winner string
	switch {
	case neverWritten(as):
		// Every copy sealed and none exists: the queue never had a
		// record anywhere (its owner was down from the declare on).
		// Nothing can be lost; its placement's owner starts it afresh.
		winner = as[0].Owner
	default:
		mode := s.Queues[r.Queue].Config.Durability
		for _, a := range as {
			if !a.Installable(mode) {
				return nil
			}
		}
		var ok bool
		if winner, ok = pickOwner(as); !ok {
			shipTails(as)
			return nil // the chosen owner takes the better tails, then seals again
		}
	}
	for i := range as {
		a := &as[i]
		var followers []string
		for _, n := range a.Copies() {
			if n != winner {
				followers = append(followers, n)
			}
		}
		a.Owner, a.Followers, a.Sealing = winner, followers, false
		a.TailFrom, a.TailTo = "", ""
	}
	q := s.Queues[r.Queue]
	if q.LastFailover != nil {
		f := *q.LastFailover
		f.To, f.InstalledAt = winner, r.At
		q.LastFailover = &f
	}
	s.Queues[r.Queue] = q
	return nil
}

// shipTails, when no witness is best in every partition, picks the
// witness best in the most partitions (in pickOwner's order) to own the
// queue, and names for every partition where it is not the best the best
// witness it takes that partition's tail from. It changes nothing once
// chosen.
func shipTails(as []Assignment) {
	if as[0].TailTo != "" {
		return
	}
	order := slices.Sorted(slices.Values(as[0].Followers))
	order = append(order, as[0].Owner)
	best := func(a Assignment) (Seal, bool) {
		var b Seal
		found := false
		for _, n := range order {
			i := slices.IndexFunc(a.Seals, func(x Seal) bool { return x.Node == n })
			if i < 0 || !a.Seals[i].Witness {
				continue
			}
			if sl := a.Seals[i]; !found || betterSeal(sl, b) > 0 {
				b, found = sl, true
			}
		}
		return b, found
	}
	target, most := "", -1
	for _, n := range order {
		wins := 0
		for _, a := range as {
			if a.neverWritten() {
				continue
			}
			i := slices.IndexFunc(a.Seals, func(x Seal) bool { return x.Node == n })
			if i < 0 || !a.Seals[i].Witness {
				wins = -1
				break
			}
			if b, ok := best(a); ok && betterSeal(b, a.Seals[i]) == 0 {
				wins++
			}
		}
		if wins > most {
			target, most = n, wins
		}
	}
	if most < 0 {
		return // no witness of every partition: wait for more seals
	}
	for i := range as {
		a := &as[i]
		j := slices.IndexFunc(a.Seals, func(x Seal) bool { return x.Node == target })
		if b, ok := best(*a); ok && betterSeal(b, a.Seals[j]) > 0 {
			a.TailFrom, a.TailTo = b.Node, target
		}
	}
}

// betterSeal compares two copies' histories: the epoch of the last
// record, then the end.
func betterSeal(x, y Seal) int {
	return cmp.Or(cmp.Compare(x.LastEpoch, y.LastEpoch), cmp.Compare(x.End, y.End))
}

// neverWritten reports whether every copy of every partition sealed and
// none of them exists.
func neverWritten(as []Assignment) bool {
	for _, a := range as {
		if !a.neverWritten() {
			return false
		}
	}
	return true
}

// neverWritten reports whether every copy of the partition sealed and none
// of them exists: no node holds a record of it, so nothing of it can be
// lost, and whichever owner the other partitions' seals choose starts it
// afresh (an owner that crashed while it created a new queue's
// partitions, or a broker that opened an older declaration with fewer).
func (a Assignment) neverWritten() bool {
	if len(a.Seals) < a.Replicas() {
		return false
	}
	for _, sl := range a.Seals {
		if !sl.NoCopy {
			return false
		}
	}
	return true
}

// pickOwner is the witness whose copy is best in every partition: the
// latest epoch of its last record, then the longest (Raft's comparison of
// logs). Among equals a follower goes first, by id, and the old owner
// last: whatever made the queue fail over (a latched log, a power cut, a
// node that stopped answering) may strike it again.
func pickOwner(as []Assignment) (string, bool) {
	better := betterSeal
	candidates := slices.Sorted(slices.Values(as[0].Followers))
	candidates = append(candidates, as[0].Owner)
	for _, n := range candidates {
		best := true
		for _, a := range as {
			if a.neverWritten() {
				continue // any owner starts it afresh
			}
			i := slices.IndexFunc(a.Seals, func(x Seal) bool { return x.Node == n })
			if i < 0 || !a.Seals[i].Witness {
				best = false
				break
			}
			for _, o := range a.Seals {
				if o.Witness && better(o, a.Seals[i]) > 0 {
					best = false
				}
			}
		}
		if best {
			return n, true
		}
	}
	return "", false
}
