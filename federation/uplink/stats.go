package uplink

import "time"

// State is where an uplink, or one of its queues, stands.
type State string

const (
	// StateConnecting: dialling the remote broker for the first time.
	StateConnecting State = "connecting"
	// StateConnected: the link is up and forwarding.
	StateConnected State = "connected"
	// StateBackingOff: the last attempt failed; the next one waits.
	StateBackingOff State = "backing off"
	// StateRefused: the remote broker refused the uplink (a token, a
	// conflicting queue); the uplink tries again at its longest backoff,
	// so that an operator's fix is picked up.
	StateRefused State = "refused"
	// StateWaiting: the local queue does not exist (yet).
	StateWaiting State = "waiting"
)

// Stats is an uplink's state and counters, since it started.
type Stats struct {
	Name string   `json:"name"`
	To   []string `json:"to"`
	// Remote is the address the link is connected to now; "" while down.
	Remote    string       `json:"remote"`
	State     State        `json:"state"`
	LastError string       `json:"last_error"`
	Window    int          `json:"window"` // most publishes in flight, per queue
	Queues    []QueueStats `json:"queues"`
}

// QueueStats is one forwarded queue.
type QueueStats struct {
	Local  string `json:"local"`
	Remote string `json:"remote"`
	State  State  `json:"state"`
	Reason string `json:"reason"` // why it is backing off, refused or waiting
	// LocalDurability and RemoteDurability are the two queues' modes
	// ("" until known); Weakened says a durable local queue is forwarded
	// into a buffered remote one, so the remote confirm, after which the
	// local copy is deleted, is a weaker promise than the local queue's.
	LocalDurability  string `json:"local_durability"`
	RemoteDurability string `json:"remote_durability"`
	Weakened         bool   `json:"weakened"`
	// BacklogMessages and BacklogBytes are the local queue's unsettled
	// messages: what is still to forward, in flight included (-1 unknown).
	BacklogMessages int64 `json:"backlog_messages"`
	BacklogBytes    int64 `json:"backlog_bytes"`
	// OldestWaiting is how long the oldest message the uplink holds has
	// waited for its remote confirm.
	OldestWaiting time.Duration `json:"oldest_waiting_ns"`
	InFlight      int           `json:"in_flight"`
	// Forwarded counts messages the remote confirmed (Duplicates of them
	// as repeats it already held) and the uplink then acked locally;
	// Resent counts publishes sent again after a failure; Refused counts
	// messages the remote can never take (too large, invalid), settled
	// locally as discarded (dead-lettered if the local queue has a
	// dead-letter queue).
	Forwarded   uint64    `json:"forwarded"`
	Duplicates  uint64    `json:"duplicates"`
	Resent      uint64    `json:"resent"`
	Refused     uint64    `json:"refused"`
	LastConfirm time.Time `json:"last_confirm"` // zero: none yet
}
