package appliance

import "time"

// Observer sees what the broker does as it happens, for metrics. Set it in
// Options.Observer; nil (the default) costs nothing. Every method is called
// outside the broker's locks, on the goroutine that completes the event
// (publish completions, partition dispatchers, log syncers), possibly
// concurrently: implementations must be safe for concurrent use and cheap
// (count, observe a histogram; no I/O, no blocking).
//
// State the broker already keeps (QueueInfo: frontiers, backlog, counters;
// the logs' status) is not reported here: read it when it is needed.
type Observer interface {
	// Published is called once per publish to an open queue when it
	// completes: err is nil for a confirm (duplicates included), else why
	// it was refused or failed. took runs from the broker accepting the
	// publish to the confirm.
	Published(queue string, mode Durability, took time.Duration, err error)
	// Delivered is called after each delivery is handed to a subscription;
	// deliveries is 1 on the first, and sincePublish the time from the
	// publish to this delivery.
	Delivered(queue string, mode Durability, deliveries uint32, sincePublish time.Duration)
	// Synced is called after each fdatasync of a partition's log segment.
	Synced(queue string, partition int, took time.Duration, err error)
}

// FanInObserver is an Observer that also sees each fdatasync's group
// commit: how many durable appends it completed.
type FanInObserver interface {
	SyncCompleted(queue string, partition int, appends int)
}

// fanInObserver is a log's OnSyncCompleted hook reporting to the broker's
// observer, or nil when it does not take them.
func (b *Broker) fanInObserver(queue string, partition int) func(int) {
	obs, ok := b.opts.Observer.(FanInObserver)
	if !ok {
		return nil
	}
	return func(appends int) { obs.SyncCompleted(queue, partition, appends) }
}

// syncObserver is a log's OnSync hook reporting to the broker's observer,
// or nil without one.
func (b *Broker) syncObserver(queue string, partition int) func(time.Duration, error) {
	obs := b.opts.Observer
	if obs == nil {
		return nil
	}
	return func(took time.Duration, err error) { obs.Synced(queue, partition, took, err) }
}
