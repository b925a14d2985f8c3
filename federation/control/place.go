package control

import (
	"cmp"
	"maps"
	"slices"
	"strings"
)

// Placement rules. Every choice is a pure function of the state, with ties
// broken by member id, so every node computes the same placement from the
// same log.
//
//   - place: a new queue's owner is the member owning the fewest
//     partitions; its followers, the same for every partition, are the
//     members hosting the fewest replicas.
//   - fill: when a member joins or the replicas setting rises, every
//     partition with fewer copies than the cluster now places gains
//     followers by the same rule. The owner and the epoch stay: the epoch
//     rises only when the owner changes. Followers are never removed here.
//     A queue declared without a policy keeps the default, a majority of
//     its copies: replica_buffered:1 on one copy becomes
//     replica_buffered:2 on three.

// place spreads a new queue: its owner is the member owning the fewest
// partitions (every partition of a queue has the same owner, so a node
// serves a queue whole), and its followers, the same for every partition
// (a recovery installs one owner for all of them, from the copies they
// share), are those hosting the fewest replicas.
//
// owner, when not empty, is the owner to use instead (a queue and its
// dead-letter queue share a node: see colocate).
func (s *State) place(queue string, partitions, replicas int, p Policy, owner string) []Assignment {
	owned, hosted := s.load()
	ids := slices.Collect(maps.Keys(s.Members))
	byLoad(ids, owned)
	if owner == "" {
		owner = ids[0]
	}
	others := slices.DeleteFunc(ids, func(id string) bool { return id == owner })
	byLoad(others, hosted)
	followers := others[:replicas-1]
	out := make([]Assignment, partitions)
	for part := range out {
		out[part] = Assignment{Queue: queue, Partition: part, Owner: owner, Followers: slices.Clone(followers), Epoch: 1, Policy: p}
	}
	return out
}

// fill gives every partition with fewer copies than the cluster now
// places (min of the replicas setting and the member count) the followers
// it lacks, partitions taken in queue-name and partition order, each new
// follower the member hosting the fewest replicas that holds no copy of
// the partition yet.
func (s *State) fill() {
	want := s.replicas()
	_, hosted := s.load()
	for _, name := range slices.Sorted(maps.Keys(s.Assignments)) {
		as := s.Assignments[name]
		if len(as) == 0 {
			continue
		}
		// A queue's partitions share their copies (one owner serves the
		// queue whole, and a recovery installs one owner for all of them):
		// the first partition's decide for every one.
		a0 := as[0]
		lack := want - a0.Replicas()
		if lack <= 0 || a0.Sealing { // a recovery counts the copies it started with
			continue
		}
		var free []string
		for id := range s.Members {
			if id != a0.Owner && !slices.Contains(a0.Followers, id) {
				free = append(free, id)
			}
		}
		byLoad(free, hosted)
		add := free[:min(lack, len(free))]
		as = s.ownAssignments(name) // changed below
		for _, f := range add {
			hosted[f] += len(as)
		}
		for i := range as {
			a := &as[i]
			for _, f := range add {
				if !slices.Contains(a.Followers, f) && f != a.Owner {
					a.Followers = append(slices.Clip(a.Followers), f)
				}
			}
			// A default policy is a majority of the copies there are.
			if q := s.Queues[name]; q.DefaultPolicy {
				a.Policy = defaultPolicy(q.Config.Durability, a.Replicas())
				if i == 0 {
					q.Policy = a.Policy
					s.Queues[name] = q
				}
			}
		}
	}
}

// load counts, per member, the partitions it owns and the replicas
// (owned or followed) it hosts.
func (s *State) load() (owned, hosted map[string]int) {
	owned, hosted = map[string]int{}, map[string]int{}
	for _, as := range s.Assignments {
		for _, a := range as {
			owned[a.Owner]++
			hosted[a.Owner]++
			for _, f := range a.Followers {
				hosted[f]++
			}
		}
	}
	return owned, hosted
}

// byLoad orders ids by count, ties by id.
func byLoad(ids []string, count map[string]int) {
	slices.SortFunc(ids, func(a, b string) int {
		return cmp.Or(cmp.Compare(count[a], count[b]), strings.Compare(a, b))
	})
}
