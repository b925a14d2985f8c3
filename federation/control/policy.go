package control

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/fibril-edge/fibril/appliance"
)

// ErrInvalidPolicy is returned for a policy string that does not parse or
// does not fit the cluster.
var ErrInvalidPolicy = fmt.Errorf("invalid replication policy: %w", appliance.ErrInvalid)

// PolicyKind names the rule that decides how many copies a confirm and a
// delivery wait for.
type PolicyKind string

const (
	// ReplicaDurable waits for N replicas (owner included) to have synced.
	ReplicaDurable PolicyKind = "replica_durable"
	// MajorityDurable waits for a majority of the replicas to have synced.
	MajorityDurable PolicyKind = "majority_durable"
	// ReplicaBuffered waits for N replicas to have written (handed to the
	// operating system), not synced.
	ReplicaBuffered PolicyKind = "replica_buffered"
)

// DeprecatedReplicaAccepted is the old name of replica_durable.
const DeprecatedReplicaAccepted = "replica_accepted"

// ReplicaAcceptedWarning is logged and returned in the API for a policy
// written as replica_accepted.
const ReplicaAcceptedWarning = "policy replica_accepted is deprecated and means replica_durable; write replica_durable"

// Policy is a partition's replication rule.
type Policy struct {
	Kind PolicyKind `json:"kind"`
	// N is the count for replica_durable and replica_buffered; 0 for
	// majority_durable.
	N int `json:"n,omitempty"`
}

// ParsePolicy reads "replica_durable:N", "majority_durable",
// "replica_buffered:N", or "replica_accepted:N" (with a deprecation
// warning). The empty string is the zero Policy: "use the default".
func ParsePolicy(s string) (p Policy, warning string, err error) {
	if s == "" {
		return Policy{}, "", nil
	}
	name, count, hasCount := strings.Cut(s, ":")
	if name == DeprecatedReplicaAccepted {
		name, warning = string(ReplicaDurable), ReplicaAcceptedWarning
	}
	switch PolicyKind(name) {
	case MajorityDurable:
		if hasCount {
			return Policy{}, "", fmt.Errorf("%w: %q: majority_durable takes no count", ErrInvalidPolicy, s)
		}
		return Policy{Kind: MajorityDurable}, warning, nil
	case ReplicaDurable, ReplicaBuffered:
		n, err := strconv.Atoi(count)
		if !hasCount || err != nil || n < 1 || n > MaxReplicas {
			return Policy{}, "", fmt.Errorf("%w: %q: want %s:N with N from 1 to %d", ErrInvalidPolicy, s, name, MaxReplicas)
		}
		return Policy{Kind: PolicyKind(name), N: n}, warning, nil
	}
	return Policy{}, "", fmt.Errorf("%w: %q (want replica_durable:N, majority_durable or replica_buffered:N)", ErrInvalidPolicy, s)
}

// String is the policy as written in configuration.
func (p Policy) String() string {
	if p.Kind == MajorityDurable || p.Kind == "" {
		return string(p.Kind)
	}
	return fmt.Sprintf("%s:%d", p.Kind, p.N)
}

// IsZero reports an unset policy.
func (p Policy) IsZero() bool { return p.Kind == "" }

// Durability is the queue mode the policy implies: buffered for
// replica_buffered, durable otherwise.
func (p Policy) Durability() appliance.Durability {
	if p.Kind == ReplicaBuffered {
		return appliance.Buffered
	}
	return appliance.Durable
}

// Required is how many of replicas copies (owner included) a confirm waits
// for.
func (p Policy) Required(replicas int) int {
	if p.Kind == MajorityDurable {
		return replicas/2 + 1
	}
	return p.N
}

// Boundary names the position a queue of the given mode counts: written
// copies for a buffered queue, durable ones for a durable queue, whatever
// the policy's name (the policy gives the count).
func Boundary(mode appliance.Durability) string {
	if mode == appliance.Buffered {
		return "written"
	}
	return "durable"
}

// Describe reads the policy on a queue of the given mode as an operator
// would: "written on 2 of 3".
func (p Policy) Describe(mode appliance.Durability, replicas int) string {
	return fmt.Sprintf("%s on %d of %d", Boundary(mode), p.Required(replicas), replicas)
}
